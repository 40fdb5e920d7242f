"""Kernel history: one series (kernel, case, dtype, GPU) over the commits of the tracked
branch, its median with the 95% CI band, change points, bisection verdicts and method
changes marked on the time axis, and for every point the command that measures that commit
again the same way."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from kernelwatch.dashboards import common, marks

UID = "kw-history"

_SERIES = "series_key = '$case'"


def _band(lower: str, upper: str) -> list[tuple[str, list[DynamicConfigValue]]]:
    """Overrides drawing ``upper``..``lower`` as a shaded band without lines."""
    no_line = DynamicConfigValue(id_val="custom.lineWidth", value=0)
    return [
        (
            upper,
            [
                no_line,
                DynamicConfigValue(id_val="custom.fillBelowTo", value=lower),
                DynamicConfigValue(id_val="custom.fillOpacity", value=20),
            ],
        ),
        (lower, [no_line]),
    ]


#: An unjudged night drawn as a grey point off the median's line.
_UNJUDGED = [
    DynamicConfigValue(id_val="custom.drawStyle", value="points"),
    DynamicConfigValue(id_val="custom.pointSize", value=7),
    DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": "#8e8e8e"}),
]


def dashboard() -> sdk.Dashboard:
    """The kernel history dashboard."""
    median = common.timeseries_panel(
        "Median with 95% CI: $kernel $dtype on $gpu",
        f"""
SELECT measured_at AS "time", CASE WHEN NOT unjudged THEN median_ns END AS median,
  CASE WHEN unjudged THEN median_ns END AS unjudged, ci_low_ns AS ci_low, ci_high_ns AS ci_high
FROM report_series_history
WHERE {_SERIES} AND $__timeFilter(measured_at)
ORDER BY 1
""",
        w=24,
        h=10,
        unit="ns",
    ).description(
        "The chosen series' median per nightly with its 95% CI band (from the stored samples), in "
        "ns. Red marks: change points; purple: bisection verdicts at the nightly point of the "
        "probed commit; orange: what the nightly suspected and its same-night A/B; blue: method "
        "changes. Grey points: unjudged nights, whose CI stayed wider than the margin they "
        "would be judged by after a second measurement (the band shows how wide); they are "
        "kept out of the level later nights are compared with."
    )
    for name, properties in [*_band("ci_low", "ci_high"), ("unjudged", _UNJUDGED)]:
        median = median.override_by_name(name, properties)
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: kernel history",
            "One series over commits: median and CI, change points, bisection verdicts, "
            "method changes, and a repro command per point.",
            since="180d",
        )
        .with_variable(common.repository_variable())
        .with_variable(common.kernel_variable(multi=False))
        .with_variable(
            common.variable(
                "dtype",
                "dtype",
                "SELECT DISTINCT dtype FROM report_series "
                "WHERE repository = '$repository' AND kernel = '$kernel' ORDER BY 1",
            )
        )
        .with_variable(common.gpu_variable(multi=False))
        .with_variable(
            common.variable(
                "case",
                "Case",
                """
SELECT case_label || ' [' || method || ']' AS __text, series_key AS __value
FROM report_series
WHERE repository = '$repository' AND kernel = '$kernel' AND dtype = '$dtype'
  AND device_model = '$gpu'
ORDER BY 1
""",
            )
        )
        .annotation(marks.change_points(_SERIES))
        .annotation(marks.bisection_verdicts(_SERIES))
        .annotation(
            common.sql_annotation(
                "Checked the same night",
                f"""
SELECT point_at AS "time", summary AS text, 'suspect,' || outcome AS tags
FROM report_night_suspects
WHERE {_SERIES} AND $__timeFilter(point_at)
""",
                "orange",
            )
        )
        .annotation(
            common.sql_annotation(
                "Method changes and baseline resets",
                f"""
SELECT at AS "time", text, kind AS tags
FROM report_annotations
WHERE ({_SERIES} OR (series_key IS NULL AND repository = '$repository'))
  AND $__timeFilter(at)
""",
                "blue",
            )
        )
        .with_panel(median)
        .with_panel(
            common.timeseries_panel(
                "%SOL and speedup over the stock library",
                f"""
SELECT measured_at AS "time", pct_sol, speedup
FROM report_series_history
WHERE {_SERIES} AND $__timeFilter(measured_at)
ORDER BY 1
""",
                w=12,
                h=8,
                unit="percent",
            )
            .description(
                "%SOL per nightly (left axis, percent) and speedup over the stock library measured"
                " in the same run (right axis, x; above 1 is faster than the library)."
            )
            .override_by_name(
                "speedup",
                [
                    common.unit("x"),
                    DynamicConfigValue(id_val="custom.axisPlacement", value="right"),
                ],
            )
        )
        .with_panel(
            common.table_panel(
                "Change points of this series",
                f"""
SELECT cp.at, cp.commit_sha, cp.kind, cp.direction, cp.rel_change, cp.drift_slope,
  cp.drift_end_sha, cp.before_ns, cp.after_ns, cp.regression_id, cp.regression_state,
  g.culprit_sha, g.good_sha, g.bad_sha, cp.detector
FROM report_change_points cp
  LEFT JOIN report_regressions g ON g.regression_id = cp.regression_id
WHERE cp.{_SERIES}
ORDER BY cp.at DESC
""",
                w=12,
                h=8,
            )
            .description(
                "Every change point detected on this series, newest first: a step or a drift "
                "(a sustained slope: its change per night, and the commit it stopped at, empty "
                "while it goes on), relative change (percent; a drift's over its whole ramp), "
                "level before and after (ns), the regression it belongs to with its state, "
                "culprit and good..bad range."
            )
            .override_by_name("rel_change", [common.unit("percentunit")])
            .override_by_name("drift_slope", [common.unit("percentunit")])
        )
        .with_panel(
            common.table_panel(
                "Points, with the command that measures each commit again",
                f"""
SELECT measured_at, commit_sha, median_ns, ci_low_ns, ci_high_ns, rel_ci_halfwidth, unjudged,
  n, throttled_count, config, host, device_uuid, run_id, repro
FROM report_history_points
WHERE {_SERIES} AND $__timeFilter(measured_at)
ORDER BY measured_at DESC
""",
                w=24,
                h=10,
            )
            .description(
                "Every nightly point in the time range with its CI (unjudged: wider than its "
                "margin after a second measurement), sample count, throttled "
                "samples, launch config, host and device; repro is the command that measures that "
                "commit again the same way (run it in a clone of the kernel repository)."
            )
            .override_by_name("rel_ci_halfwidth", [common.unit("percentunit")])
        )
    )
