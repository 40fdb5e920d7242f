"""Fleet overview: what is open, which kernels regressed on which GPU in the time range, how
every kernel moved on every GPU since the start of the range, and how far each is from
speed-of-light: "which kernels regressed this quarter on B200" in one screen."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.models.dashboard import DynamicConfigValue

from kernelwatch.analysis.thresholds import DetectorConfig
from kernelwatch.config.settings import LOCAL_POOL
from kernelwatch.dashboards import common, links
from kernelwatch.dashboards.limits import NIGHTLY_MISSING_HOURS

UID = "kw-fleet"

MORNING = "Last night: what the nightly decided, then the rest"
MORNING_ROWS = 200
OPEN = "open regressions"
UNTRIAGED = "untriaged"
REGRESSED = "kernel x GPU regressed in range"
SHORT = "series too short to judge"
QUARANTINED = "GPUs quarantined in range"
HOURS = "hours since the stalest watched pool's nightly"
#: Nightly points a series needs before change-point detection can place a change in it.
TOO_SHORT = 2 * DetectorConfig().min_size


def _colours(*steps: tuple[float | None, str]) -> list[DynamicConfigValue]:
    """Override properties: absolute thresholds ``steps`` colouring the value."""
    return [DynamicConfigValue(id_val="thresholds", value=common.thresholds(*steps).build())]


def dashboard(pools: Sequence[str] = (LOCAL_POOL,)) -> sdk.Dashboard:
    """The fleet overview dashboard; its hours since the last nightly are over ``pools``,
    the pools whose pipeline ``kw-nightly-missing`` watches."""
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
            common.table_panel(MORNING, _morning_sql(), w=16, h=10)
            .description(
                "Per case, what the latest nightly decided: a regression or improvement the "
                "same night's A/B confirmed (magnitude: the regression's, as every panel shows "
                "it), a suspicion still unconfirmed or waiting, one the A/B found to be noise, "
                "or not suspected. The ab_ columns are that A/B's own verdict, ratio, 95% CI "
                "and p-value over its own commits, which are not the previous nightly's when "
                "several commits landed. night_ratio is only context: two medians of two "
                "nights that may have run on different GPUs. caveats: a GPU model whose "
                f"nightly is over {NIGHTLY_MISSING_HOURS} h older than the newest (stale), "
                "failed nightlies between or after the two nights, two GPUs. Click a row for "
                "its history."
            )
            .decimals(3)
            .data_links(common.history_links())
            .override_by_name("magnitude", [common.unit("percentunit")])
            .override_by_name("ab_p_value", [common.unit("sci")])
        )
        .with_panel(
            common.table_panel(
                "Last night's correctness and static findings",
                f"""
SELECT night, kind, outcome, kernel, case_label, dtype, device_model, verdict,
  regression_id, suspicion, head_sha, repository, {links.window_columns("night")}
FROM report_night_suspects
WHERE repository = '$repository' AND kind <> 'timing' AND $__timeFilter(night)
  AND night >= (SELECT max(night) FROM report_night_suspects
                WHERE repository = '$repository') - interval '1 day'
ORDER BY night DESC
""",
                w=8,
                h=10,
            )
            .description(
                "Correctness failures and static (build) findings of the latest night, with "
                "what the same night made of them. Click a row for its kernel's builds."
            )
            .data_links([common.builds_link()])
        )
        .with_panel(
            common.stat_panel(
                "At a glance",
                f"""
SELECT
  (SELECT count(*) FROM report_open_regressions
     WHERE repository = '$repository') AS "{OPEN}",
  (SELECT count(*) FROM report_open_regressions
     WHERE repository = '$repository' AND state = 'untriaged') AS "{UNTRIAGED}",
  (SELECT count(*) FROM report_regressed_kernels($__timeFrom(), $__timeTo())
     WHERE repository = '$repository') AS "{REGRESSED}",
  (SELECT count(*) FROM report_series_lengths
     WHERE repository = '$repository' AND points < {TOO_SHORT}) AS "{SHORT}",
  (SELECT count(*) FROM report_device_health($__timeFrom(), $__timeTo())
     WHERE quarantined) AS "{QUARANTINED}",
  (SELECT max(hours_since) FROM report_pool_freshness
     WHERE repository = '$repository' AND pool IN ({common.sql_strings(pools)})) AS "{HOURS}"
""",
                w=24,
                h=4,
            )
            .description(
                "Counts now, except two over the time range: the regressed kernel x GPU pairs "
                "(change points in the range, false positives and won't-fix left out) and the "
                "GPUs the health rule quarantined on the range's runs. A series needs "
                f"{TOO_SHORT} nightly points before change-point detection can judge it: "
                "while many are shorter, 0 open regressions means 'too early to tell'. The "
                "hours are those of the stalest GPU model of the watched pools "
                f"({', '.join(pools)}), and turn red at {NIGHTLY_MISSING_HOURS}, when "
                "kw-nightly-missing fires."
            )
            .unit("none")
            .thresholds(common.thresholds((None, "blue")))
            .override_by_name(UNTRIAGED, _colours((None, "green"), (1, "orange")))
            .override_by_name(SHORT, _colours((None, "green"), (1, "orange")))
            .override_by_name(QUARANTINED, _colours((None, "green"), (1, "red")))
            .override_by_name(
                HOURS,
                [common.unit("h"), *_colours((None, "green"), (NIGHTLY_MISSING_HOURS, "red"))],
            )
        )
        .with_panel(
            common.table_panel(
                "Open regressions",
                f"""
SELECT t.regression_id, t.kind, t.title, t.state, t.kernels, t.device_models, t.magnitude,
  t.change_points, t.culprit_sha, t.good_sha, t.bad_sha, t.assignee, t.age_days, t.repository,
  coalesce(t.kernel, ns.kernel) AS kernel, coalesce(t.dtype, ns.dtype) AS dtype,
  coalesce(t.device_model, ns.device_model) AS device_model, t.series_key, rr.repro,
  {links.window_columns("coalesce(t.change_at, ns.night)")}
FROM report_triage_links t
  LEFT JOIN report_regression_repro rr ON rr.regression_id = t.regression_id
  -- a correctness or static regression has no change point: its night's finding says where
  LEFT JOIN LATERAL (
    SELECT kernel, dtype, device_model, night FROM report_night_suspects s
    WHERE s.regression_id = t.regression_id ORDER BY suspect_id LIMIT 1
  ) ns ON t.series_key IS NULL
WHERE t.open AND t.repository = '$repository'
ORDER BY t.created_at DESC
""",
                w=12,
                h=9,
            )
            .description(
                "Every open regression, newest first, with its magnitude (the one the "
                "morning-after rows show) and repro, the command that measures it again: "
                "the culprit (before a bisection, the bad commit) against its parent on one "
                "GPU, its kernel, workload and dtype pinned. Click a row for the history of "
                "the series that "
                "moved most, around the change, or (a correctness or static regression, "
                "which has no series) for its kernel's builds around its night."
            )
            .data_links([*common.history_links(), common.builds_link()])
            .unit("none")
            .override_by_name("magnitude", [common.unit("percentunit")])
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
            )
            .description(
                "Per kernel and GPU model: regressions (false positives and won't-fix left out) "
                "whose change points fall in the time range, how many are still open, how many "
                "series moved and the worst change. Set the range to this quarter to see which "
                "kernels regressed this quarter on each GPU."
            )
            .override_by_name("worst_change", [common.unit("percentunit")])
        )
        .with_panel(_drift("geometric mean over cases", "ratio_geomean", 1.01, 1.03))
        .with_panel(_drift("worst case", "ratio_worst", 1.03, 1.05))
        .with_panel(
            common.table_panel(
                "%SOL heat map: mean %SOL of the latest nightly, per kernel and GPU",
                """
SELECT kernel,
  device_model || CASE WHEN partial_runs > 0 THEN ' (partial run)' ELSE '' END AS device_model,
  mean_pct_sol
FROM report_nightly_kernels
WHERE repository = '$repository'
""",
                w=12,
                h=8,
            )
            .description(
                "Mean %SOL (the larger of compute and memory throughput against the GPU's "
                "datasheet peak) over the cases of the latest nightly per GPU model; red under 40,"
                " green from 80. A GPU model whose latest nightly was partial is labelled (partial"
                " run)."
            )
            .with_transformation(common.matrix("kernel", "device_model", "mean_pct_sol"))
            .unit("percent")
            .decimals(1)
            .thresholds(common.sol_thresholds())
            .override_by_field_type("number", common.cell_colors())
        )
    )


def _morning_sql() -> str:
    """The morning-after rows: the nightly's decisions first, then the rest, each with what
    makes its comparison doubtful."""
    stale = f"behind_newest_h > {NIGHTLY_MISSING_HOURS}"
    order = f"decided_rank, {stale}, night_ratio DESC"
    # Only the rows shown are numbered and given their caveats and repro: numbering and
    # sorting every case's wide row cost 20 ms of 32 at fleet scale, the repro per case 95.
    return f"""
WITH top AS (
  SELECT decided_rank, decided, kernel, dtype, case_label, device_model, magnitude, ab_verdict,
    ab_ratio, ab_ci_low, ab_ci_high, ab_p_value, ab_base_sha, ab_head_sha, night_ratio,
    previous_sha, commit_sha, behind_newest_h, failed_after, failed_between, same_gpu,
    suspicion, regression_id, run_status, night, method, repository, series_key
  FROM report_night_comparison_top
  WHERE repository = '$repository' AND $__timeFilter(night)
  ORDER BY {order}
  LIMIT {MORNING_ROWS}
), shown AS (
  SELECT row_number() OVER (ORDER BY {order}) AS "#", decided,
    kernel, dtype, case_label, device_model, magnitude, ab_verdict, ab_ratio, ab_ci_low,
    ab_ci_high, ab_p_value, ab_base_sha, ab_head_sha, night_ratio, previous_sha, commit_sha,
    concat_ws('; ',
      CASE WHEN {stale} THEN 'stale: ' || round(behind_newest_h::numeric) || ' h older than '
        || 'the newest nightly' END,
      CASE WHEN failed_after > 0 THEN 'the nightly after it failed' END,
      CASE WHEN failed_between > 0 THEN 'across ' || failed_between || ' failed nightly run(s)'
        END,
      CASE WHEN NOT same_gpu THEN 'the two nights ran on different GPUs' END) AS caveats,
    suspicion, regression_id, run_status, night, method, repository, series_key,
    {links.window_columns("night")}
  FROM top
)
SELECT shown.*, CASE WHEN shown.regression_id IS NOT NULL THEN (
    SELECT repro FROM report_regression_repro r WHERE r.regression_id = shown.regression_id)
  END AS repro
FROM shown
ORDER BY 1
"""


def _drift(what: str, column: str, yellow: float, red: float) -> Any:
    """The kernel x GPU matrix of latest / first nightly of the range, by ``column``."""
    return (
        common.table_panel(
            f"Latest nightly / first nightly of the range ({what})",
            f"""
SELECT kernel, device_model, {column}
FROM report_kernel_drift($__timeFrom())
WHERE repository = '$repository'
""",
            w=12,
            h=8,
        )
        .description(
            "Per kernel and GPU: the latest nightly's median over the first nightly's in the "
            f"time range, {what}. Yellow from {yellow}, red from {red}."
        )
        .with_transformation(common.matrix("kernel", "device_model", column))
        .decimals(3)
        .thresholds(common.thresholds((None, "green"), (yellow, "yellow"), (red, "red")))
        .override_by_field_type("number", common.cell_colors())
    )
