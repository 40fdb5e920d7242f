"""Fleet noise and health: per-GPU noise and throttling per day, which devices are
quarantined over the time range and why, and the runs that failed: "which node is noisy";
and what the fleet's device time cost, per pool and night and per PR check (``cost.py``)."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.builders import timeseries

from kernelwatch.dashboards import common, cost

UID = "kw-health"

_DEVICE = "model || ' ' || host || ' ' || coalesce(uuid, '')"


def _per_gpu_and_day(title: str, value: str) -> timeseries.Panel:
    """A line per device of ``value``, a column of report_device_noise (one row a day)."""
    return common.timeseries_panel(
        title,
        f"""
SELECT day AS "time", {_DEVICE} AS metric, {value}
FROM report_device_noise
WHERE model = ANY(ARRAY[$gpu]::text[]) AND $__timeFilter(day)
ORDER BY 1
""",
        w=12,
        h=8,
        unit="percentunit",
    )


def dashboard(prices: cost.Prices = cost.UNPRICED) -> sdk.Dashboard:
    """The fleet noise and health dashboard, its cost panels at ``prices``."""
    board = (
        common.new_dashboard(
            UID,
            "kernelwatch: fleet noise and health",
            "Noise (mean relative CI half-width of the median) and throttled samples per GPU "
            "and day, quarantined devices, failed runs.",
            since="30d",
        )
        .with_variable(
            common.variable(
                "gpu",
                "GPU",
                "SELECT DISTINCT device_model FROM report_runs ORDER BY 1",
                multi=True,
                include_all=True,
            )
        )
        .with_panel(
            _per_gpu_and_day(
                "Noise per GPU: mean relative CI half-width, per day", "mean_rel_ci"
            ).description(
                "Per device and day, the mean relative 95% CI half-width of its measurements "
                "(percent): a device far above its model's others is noisy."
            )
        )
        .with_panel(
            _per_gpu_and_day(
                "Throttled samples per GPU, per day",
                "throttled_samples::float8 / NULLIF(samples, 0) AS throttled",
            ).description(
                "Per device and day, the share of samples taken while the GPU throttled its clocks"
                " (percent)."
            )
        )
        .with_panel(
            common.table_panel(
                "Devices over the time range (quarantined first)",
                """
SELECT device_model, host, device_uuid, quarantined, reason, runs, failed_runs,
  partial_runs, throttled_fraction, mean_rel_ci, model_median_rel_ci, last_run_at
FROM report_device_health($__timeFrom(), $__timeTo())
WHERE device_model = ANY(ARRAY[$gpu]::text[])
ORDER BY quarantined DESC, mean_rel_ci DESC
""",
                w=24,
                h=9,
            )
            .description(
                "Per device over the time range: runs, failures, throttled share and noise against"
                " its model's median; quarantined when more than 5% of samples throttled, noise is"
                " twice the model's, or half its runs failed (reason says which)."
            )
            .override_by_name("throttled_fraction", [common.unit("percentunit")])
            .override_by_name("mean_rel_ci", [common.unit("percentunit")])
            .override_by_name("model_median_rel_ci", [common.unit("percentunit")])
        )
        .with_panel(
            common.table_panel(
                "Failed and partial runs",
                """
SELECT started_at, status, trigger, repository, commit_sha, device_model, host,
  device_uuid, pool, measurements, measurement_errors, correctness_failed, run_id
FROM report_runs
WHERE status IN ('failed', 'partial') AND device_model = ANY(ARRAY[$gpu]::text[])
  AND $__timeFilter(started_at)
ORDER BY started_at DESC
""",
                w=24,
                h=8,
            ).description(
                "Runs that failed or measured only part of the suite, newest first, with trigger, "
                "pool, host and device: kw-run-failed alerts on the failed nightly ones of "
                "configured pools."
            )
        )
        .with_panel(
            common.table_panel(
                "A/B false alarms measured on A/A pairs (flagged first)",
                """
SELECT repository, pool, device_model, pairs, different, rate, stated, p_value, flagged,
  computed_at
FROM report_aa_rates
ORDER BY flagged DESC, rate DESC
""",
                w=24,
                h=7,
            )
            .description(
                "Two consecutive nightly measurements of a case with the same build identity "
                "on one pool ran the same GPU work: each such pair the A/B rule calls SLOWER or "
                "FASTER is a false alarm. Per pool and GPU model (and the whole pool), over the "
                "30 nights before the last detection pass: pairs, false alarms, their rate and "
                "the rule's stated rate (its alpha); flagged where that many false alarms are "
                "unlikely (p < 0.01) at the stated rate."
            )
            .override_by_name("rate", [common.unit("percentunit")])
            .override_by_name("stated", [common.unit("percentunit")])
            .override_by_name("p_value", [common.unit("sci")])
        )
        .with_panel(
            common.table_panel(
                "Unjudged nightly points per pool",
                """
SELECT pool, count(*) AS points, count(DISTINCT series_key) AS series,
  count(DISTINCT repository || '/' || kernel) AS kernels, max(rel_ci_halfwidth) AS widest_ci,
  max(measured_at) AS last_at
FROM report_unjudged_points
WHERE device_model = ANY(ARRAY[$gpu]::text[]) AND $__timeFilter(measured_at)
GROUP BY pool
ORDER BY points DESC
""",
                w=24,
                h=6,
            )
            .description(
                "Per pool over the time range, the nightly points that could not be judged: "
                "their 95% CI stayed wider than the margin they would be judged by (the "
                "suspicion's min_change) after a second measurement, so a change that size "
                "could not have shown. Kept out of the level later nights are compared with; "
                "a pool with many is too noisy to watch (widest_ci: percent)."
            )
            .override_by_name("widest_ci", [common.unit("percentunit")])
        )
    )
    for panel in cost.panels(prices):
        board = board.with_panel(panel)
    return board
