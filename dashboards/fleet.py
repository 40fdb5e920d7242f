"""Fleet overview: what is open, which kernels regressed on which GPU in the time range, how
every kernel moved on every GPU since the start of the range, and how far each is from
speed-of-light: "which kernels regressed this quarter on B200" in one screen."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk

from kernelwatch.dashboards import common

UID = "kw-fleet"


def dashboard() -> sdk.Dashboard:
    """The fleet overview dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: fleet overview",
            "Open regressions, kernels that regressed per GPU in the time range, latest "
            "nightly against the start of the range, and %SOL per kernel and GPU.",
            since="90d",
        )
        .with_variable(common.repository_variable())
        .with_panel(
            common.stat_panel(
                "At a glance",
                """
SELECT
  (SELECT count(*) FROM report_open_regressions
     WHERE repository = '$repository') AS "open regressions",
  (SELECT count(*) FROM report_open_regressions
     WHERE repository = '$repository' AND state = 'untriaged') AS "untriaged",
  (SELECT count(*) FROM report_regressed_kernels($__timeFrom(), $__timeTo())
     WHERE repository = '$repository') AS "kernel x GPU regressed in range",
  (SELECT count(*) FROM report_device_health($__timeFrom(), $__timeTo())
     WHERE quarantined) AS "quarantined GPUs",
  (SELECT max(hours_since) FROM report_nightly_freshness
     WHERE repository = '$repository') AS "hours since the oldest latest nightly"
""",
                w=24,
                h=4,
            )
        )
        .with_panel(
            common.table_panel(
                "Open regressions",
                """
SELECT regression_id, title, state, kernels, device_models, worst_change, change_points,
  culprit_sha, good_sha, bad_sha, assignee, age_days
FROM report_triage_board
WHERE open AND repository = '$repository'
ORDER BY created_at DESC
""",
                w=12,
                h=9,
            )
            .unit("none")
            .override_by_name("worst_change", [common.unit("percentunit")])
            .override_by_name("age_days", [common.unit("d")])
        )
        .with_panel(
            common.table_panel(
                "Kernels that regressed in the time range, per GPU",
                """
SELECT kernel, device_model, regressions, open_regressions, series, worst_change, last_at
FROM report_regressed_kernels($__timeFrom(), $__timeTo())
WHERE repository = '$repository'
ORDER BY regressions DESC, worst_change DESC
""",
                w=12,
                h=9,
            ).override_by_name("worst_change", [common.unit("percentunit")])
        )
        .with_panel(
            common.table_panel(
                "Latest nightly / first nightly of the range (geometric mean over cases)",
                """
SELECT kernel, device_model, ratio_geomean
FROM report_kernel_drift($__timeFrom())
WHERE repository = '$repository'
""",
                w=12,
                h=8,
            )
            .with_transformation(common.matrix("kernel", "device_model", "ratio_geomean"))
            .decimals(3)
            .thresholds(common.thresholds((None, "green"), (1.01, "yellow"), (1.03, "red")))
            .override_by_field_type("number", common.cell_colors())
        )
        .with_panel(
            common.table_panel(
                "%SOL heat map: mean %SOL of the latest nightly, per kernel and GPU",
                """
SELECT kernel, device_model, mean_pct_sol
FROM report_nightly_kernels
WHERE repository = '$repository'
""",
                w=12,
                h=8,
            )
            .with_transformation(common.matrix("kernel", "device_model", "mean_pct_sol"))
            .unit("percent")
            .decimals(1)
            .thresholds(common.sol_thresholds())
            .override_by_field_type("number", common.cell_colors())
        )
    )
