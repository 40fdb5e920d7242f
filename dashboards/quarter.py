"""Kernels over a quarter: "over the quarter, how do our kernels compare with the stock
library and speed-of-light, per family and GPU?" first (geometric-mean speedup and mean %SOL
per family and per kernel by night, and old -> new between the range's first and last
night, from the sums kept at ingest), then "how has kernel X on H200 moved?" for several
cases at once: ours and the baseline library's medians (log scale, by time or in commit
order), TFLOP/s and GB/s, %SOL, with change points and bisection verdicts marked where the
commit first ran."""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import common as sdk_common
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.builders import trend
from grafana_foundation_sdk.models.common import ScaleDistribution
from grafana_foundation_sdk.models.dashboard import DashboardLinkType, DataTransformerConfig

from kernelwatch.dashboards import common, marks

UID = "kw-quarter"

_CASES = "repository = '$repository' AND series_key = ANY(ARRAY[$case]::text[])"
_FAMILIES = """repository = '$repository' AND family = ANY(ARRAY[$family]::text[])
  AND device_model = ANY(ARRAY[$gpu]::text[])"""
#: What each view's rows are narrowed to: a kernel's lines also follow the kernel picker, so
#: "all cases of kernel X" is one line per GPU, summed at ingest.
_SHOWN = {
    "report_night_families": _FAMILIES,
    "report_night_kernels": _FAMILIES + " AND kernel = ANY(ARRAY[$kernel]::text[])",
}
#: A GPU model as a legend says it: "NVIDIA H100 80GB HBM3" -> "H100".
_GPU = "split_part(replace(device_model, 'NVIDIA ', ''), ' ', 1)"
#: A line per family (or kernel), GPU and method: the timer joins the name only where a
#: family's GPU measured with more than one method in the range (a method change).
_LINE = """{name} || ' ' || {gpu} || CASE WHEN count(*) OVER (PARTITION BY {name}, device_model)
    > count(*) OVER (PARTITION BY {name}, device_model, method)
    THEN ' [' || split_part(method, '/', 1) || ']' ELSE '' END"""


def _by_night(view: str, name: str, column: str) -> str:
    line = _LINE.format(name=name, gpu=_GPU)
    return f"""
SELECT night AS "time", {line} AS metric, {column}
FROM {view}
WHERE {_SHOWN[view]} AND $__timeFilter(night) AND {column} IS NOT NULL
ORDER BY 1
"""


def _old_new(view: str, names: str) -> str:
    """Per ``names``, GPU and method: the range's first and last night side by side."""
    return f"""
WITH shown AS (
  SELECT * FROM {view} WHERE {_SHOWN[view]} AND $__timeFilter(night)
), ends AS (
  SELECT {names}, device_model, method, min(night) AS first_night, max(night) AS last_night
  FROM shown GROUP BY {names}, device_model, method
)
SELECT {names}, e.device_model, split_part(e.method, '/', 1) AS timer, o.speedup_geomean AS
  speedup_old, n.speedup_geomean AS speedup_new, n.speedup_geomean / NULLIF(o.speedup_geomean, 0)
  AS speedup_change, o.mean_pct_sol AS sol_old, n.mean_pct_sol AS sol_new, n.cases,
  e.first_night, e.last_night, '$repository' AS repository,
  (date_part('epoch', e.first_night) * 1000)::bigint AS from_ms,
  (date_part('epoch', e.last_night) * 1000)::bigint + 1 AS to_ms
FROM ends e
  JOIN shown o USING ({names}, device_model, method)
  JOIN shown n USING ({names}, device_model, method)
WHERE o.night = e.first_night AND n.night = e.last_night
ORDER BY {names}, e.device_model
"""


def _log() -> sdk_common.ScaleDistributionConfig:
    return sdk_common.ScaleDistributionConfig().type(ScaleDistribution.LOG).log(10)


#: Ours and the baseline library's median per case, as two lines each.
# Each point read once, ours and the library's median as two rows of it: two reads of the
# view, as a UNION, were planned with parallel workers, whose start cost 10 ms at fleet scale.
# The library is named by the first word of its name (``torch.matmul (cuBLAS)``: torch.matmul),
# so a legend stays one line; kw-sol's table has the whole name.
_MEDIANS = f"""
SELECT {{x}}, v.metric, v.median_ns
FROM report_quarter_points
  CROSS JOIN LATERAL (VALUES (case_text || ' (ours)', median_ns),
    (case_text || ' (' || split_part(baseline, ' ', 1) || ')', baseline_median_ns))
    AS v(metric, median_ns)
WHERE {_CASES} AND $__timeFilter(measured_at) AND v.median_ns IS NOT NULL
ORDER BY 1
"""


def _old_new_panel(unit: str, view: str, names: str, description: str) -> Any:
    """The range's first and last night per ``unit`` (family or kernel) and GPU; a row links
    to this dashboard narrowed to its ``unit`` over the same nights."""
    url = (
        f"/d/{UID}/?var-repository=${{__data.fields.repository:percentencode}}"
        f"&var-{unit}=${{__data.fields.{unit}:percentencode}}"
        "&from=${__data.fields.from_ms}&to=${__data.fields.to_ms}"
    )
    link = sdk.DashboardLink("Narrow to this row").type(DashboardLinkType.LINK).url(url)
    return (
        common.table_panel(
            f"Old -> new over the time range, per {unit} and GPU",
            _old_new(view, names),
            w=12,
            h=8,
        )
        .description(description)
        .decimals(3)
        .data_links([link])
        .override_by_name("sol_old", [common.unit("percent")])
        .override_by_name("sol_new", [common.unit("percent")])
    )


def _throughput(unit: str, column: str, description: str) -> Any:
    """One throughput of the chosen cases by night, on an axis of its own unit."""
    return common.timeseries_panel(
        f"Throughput: {unit}",
        f"""
SELECT measured_at AS "time", case_text AS metric, {column}
FROM report_quarter_points
WHERE {_CASES} AND $__timeFilter(measured_at) AND {column} IS NOT NULL
ORDER BY 1
""",
        w=8,
        h=8,
        unit=f"suffix: {unit}",
    ).description(description)


def dashboard() -> sdk.Dashboard:
    """The several-cases history dashboard."""
    by_commit = (
        common.sql_panel(
            trend.Panel(),
            "Median by commit order, ours and the baseline library's (log scale)",
            _MEDIANS.format(x="commit_index"),
            w=24,
            h=9,
        )
        .description(
            "The same medians with the x axis in commit order (the n-th nightly point of each "
            "series), so a burst of merges is not squeezed into one night."
        )
        .x_field("commit_index")
        .unit("ns")
        .scale_distribution(_log())
        .with_transformation(
            DataTransformerConfig(
                id_val="partitionByValues", options={"fields": ["metric"], "keepFields": False}
            )
        )
    )
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: kernels over the quarter",
            "Several cases at once: ours against the stock library's median, in time or "
            "commit order, throughput and %SOL.",
            since="90d",
        )
        .with_variable(common.repository_variable())
        .with_variable(
            common.variable(
                "family",
                "Family",
                "SELECT DISTINCT CASE WHEN family <> '' THEN family ELSE kernel END "
                "FROM report_kernels WHERE repository = '$repository' ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_variable(common.kernel_variable(multi=True))
        .with_variable(common.gpu_variable(multi=True))
        .with_variable(
            common.variable(
                "case",
                "Cases",
                """
SELECT case_text || ' [' || method || ']' AS __text, series_key AS __value
FROM report_quarter_cases
WHERE repository = '$repository' AND kernel = ANY(ARRAY[$kernel]::text[])
  AND device_model = ANY(ARRAY[$gpu]::text[])
""",
                multi=True,
            )
        )
        .annotation(marks.change_points(_CASES))
        .annotation(marks.bisection_verdicts(_CASES))
        .with_panel(
            common.timeseries_panel(
                "Speedup over the stock library, geometric mean per family and GPU",
                _by_night("report_night_families", "family", "speedup_geomean"),
                w=12,
                h=8,
                unit="x",
            ).description(
                "Per family and GPU model, by night: the geometric mean over the family's cases "
                "of the stock library's median over ours (above 1: ours is faster). A line per "
                "measurement method: where the method changed, the timer is in the name."
            )
        )
        .with_panel(
            common.timeseries_panel(
                "Mean %SOL per family and GPU",
                _by_night("report_night_families", "family", "mean_pct_sol"),
                w=12,
                h=8,
                unit="percent",
            )
            .description(
                "Per family and GPU model, by night: the mean over the family's cases of the "
                "larger of compute and memory throughput against the GPU's peak."
            )
            .thresholds(common.sol_thresholds())
        )
        .with_panel(
            _old_new_panel(
                "family",
                "report_night_families",
                "family",
                "The first and the last night of the time range: geometric-mean speedup "
                "and mean %SOL of each family on each GPU, and the change of the speedup "
                "(below 1: ours lost ground on the library). Click a row for its kernels.",
            )
        )
        .with_panel(
            _old_new_panel(
                "kernel",
                "report_night_kernels",
                "family, kernel",
                "The same per kernel of the chosen families. Click a row for its cases.",
            )
        )
        .with_panel(
            common.timeseries_panel(
                "Speedup over the stock library, geometric mean per kernel and GPU",
                _by_night("report_night_kernels", "kernel", "speedup_geomean"),
                w=24,
                h=8,
                unit="x",
            ).description(
                "Per kernel of the chosen families and GPU model, by night: the geometric "
                "mean over its cases of the stock library's median over ours."
            )
        )
        .with_panel(
            common.timeseries_panel(
                "Median, ours and the baseline library's (log scale)",
                _MEDIANS.format(x='measured_at AS "time"'),
                w=24,
                h=10,
                unit="ns",
            )
            .description(
                "Per chosen case our median and the stock library's (cuBLAS, FlashAttention, "
                "torch: the first word of its name is in the line, the whole name in kw-sol's "
                "table) measured in the same run: when ours moves and "
                "the library's does not, the change is ours; when both move, look at the "
                "library or the machine. Log scale, so cases of different sizes share it."
            )
            .scale_distribution(_log())
        )
        .with_panel(by_commit)
        .with_panel(
            _throughput(
                "TFLOP/s",
                "tflops",
                "Achieved TFLOP/s of each chosen case, by night (compute-bound cases).",
            )
        )
        .with_panel(
            _throughput(
                "GB/s", "gbps", "Achieved GB/s of each chosen case, by night (memory-bound cases)."
            )
        )
        .with_panel(
            common.timeseries_panel(
                "%SOL",
                f"""
SELECT measured_at AS "time", case_text AS metric, pct_sol
FROM report_quarter_points
WHERE {_CASES} AND $__timeFilter(measured_at)
ORDER BY 1
""",
                w=8,
                h=8,
                unit="percent",
            )
            .description(
                "The larger of compute and memory throughput against the GPU's peak: how far "
                "each case is from speed-of-light."
            )
            .thresholds(common.sol_thresholds())
        )
    )
