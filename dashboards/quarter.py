"""Kernels over a quarter: "how has kernel X on H200 moved this quarter against
cuBLAS/FlashAttention, and how close to speed-of-light is it?" for several cases at once:
ours and the baseline library's medians (log scale, by time or in commit order), TFLOP/s and
GB/s, %SOL, with change points and bisection verdicts marked where the commit first ran."""

from __future__ import annotations

from grafana_foundation_sdk.builders import common as sdk_common
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.builders import trend
from grafana_foundation_sdk.models.common import ScaleDistribution
from grafana_foundation_sdk.models.dashboard import DataTransformerConfig

from kernelwatch.dashboards import common, marks

UID = "kw-quarter"

_CASES = "repository = '$repository' AND series_key = ANY(ARRAY[$case]::text[])"


def _log() -> sdk_common.ScaleDistributionConfig:
    return sdk_common.ScaleDistributionConfig().type(ScaleDistribution.LOG).log(10)


#: Ours and the baseline library's median per case, as two lines each.
_MEDIANS = f"""
SELECT {{x}}, case_text || ' (ours)' AS metric, median_ns FROM report_quarter_points
WHERE {_CASES} AND $__timeFilter(measured_at)
UNION ALL
SELECT {{x}}, case_text || ' (' || baseline || ')', baseline_median_ns FROM report_quarter_points
WHERE {_CASES} AND $__timeFilter(measured_at) AND baseline_median_ns IS NOT NULL
ORDER BY 1
"""


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
                "Median, ours and the baseline library's (log scale)",
                _MEDIANS.format(x='measured_at AS "time"'),
                w=24,
                h=10,
                unit="ns",
            )
            .description(
                "Per chosen case our median and the stock library's (cuBLAS, FlashAttention, "
                "torch: the name is in the line) measured in the same run: when ours moves and "
                "the library's does not, the change is ours; when both move, look at the "
                "library or the machine. Log scale, so cases of different sizes share it."
            )
            .scale_distribution(_log())
        )
        .with_panel(by_commit)
        .with_panel(
            common.timeseries_panel(
                "Throughput: TFLOP/s and GB/s",
                f"""
SELECT measured_at AS "time", case_text AS metric, tflops, gbps
FROM report_quarter_points
WHERE {_CASES} AND $__timeFilter(measured_at)
ORDER BY 1
""",
                w=12,
                h=8,
                unit="none",
            ).description("Achieved TFLOP/s and GB/s of each chosen case, by night.")
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
                w=12,
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
