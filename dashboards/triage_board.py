"""Triage board: regressions by state, each on one line with its kind (timing, correctness,
static), what opened it, what moved where, its commit range and culprit, how far bisection
got and the last triage event; what the nightlies suspected and how their same-night A/B
judged it, bisection steps and the triage history under it. Triage itself is done with
`kernelwatch regressions`."""

from __future__ import annotations

import typing

from grafana_foundation_sdk.builders import dashboard as sdk

from kernelwatch.analysis.triage_rules import OPEN, State
from kernelwatch.dashboards import common, links

UID = "kw-triage"

STATES = list(typing.get_args(State))
#: The regressions the board shows, and its counts count: open ones whatever their age,
#: closed ones opened in the time range.
_SHOWN = """repository = '$repository' AND state = ANY(ARRAY[$state]::text[])
  AND (open OR $__timeFilter(created_at))"""


def dashboard() -> sdk.Dashboard:
    """The triage board dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: triage board",
            "Regressions by triage state (open ones whatever their age, closed ones opened "
            "in the time range), the nightlies' suspects and their same-night verdicts, "
            "bisection steps and triage history.",
            since="90d",
        )
        .with_variable(common.repository_variable())
        .with_variable(common.choice("state", "State", STATES, [s for s in STATES if s in OPEN]))
        .with_panel(
            common.stat_panel(
                "Regressions per state",
                f"""
SELECT state, count(*) AS regressions
FROM report_triage_board
WHERE {_SHOWN}
GROUP BY state
ORDER BY state
""",
                w=24,
                h=4,
            )
            .description(
                "Regressions per state among exactly those the table below lists: open ones "
                "whatever their age, closed ones opened in the time range."
            )
            .reduce_options(common.row_values())
        )
        .with_panel(
            common.table_panel(
                "Regressions",
                f"""
SELECT regression_id, kind, opened_by, title, state, cause, magnitude, kernels, device_models,
  change_points, good_sha, bad_sha, culprit_sha, bisect_steps, last_verdict,
  assignee, bug_url, age_days, last_event_at, last_actor, last_note, repository, kernel, dtype,
  device_model, series_key, {links.window_columns("change_at")}
FROM report_triage_links
WHERE {_SHOWN}
ORDER BY open DESC, created_at DESC
""",
                w=24,
                h=12,
            )
            .description(
                "One line per regression: kind, what opened it, its magnitude (percent, the "
                "one every panel shows for it), kernels and GPUs, commit range and culprit, "
                "bisection progress, assignee, age (days) and the last triage event. Click a "
                "row for the history of the series that moved most, around the change."
            )
            .data_links(common.history_links())
            .override_by_name("magnitude", [common.unit("percentunit")])
            .override_by_name("age_days", [common.unit("d")])
        )
        .with_panel(
            common.table_panel(
                "Suspected at night, and what the same-night A/B said",
                f"""
SELECT night, kind, outcome, kernel, case_label, dtype, device_model, verdict, ratio, ci_low,
  ci_high, samples, gpu_seconds, regression_id, base_sha, head_sha, suspicion, note,
  repository, series_key, {links.window_columns("night")}
FROM report_night_suspects
WHERE repository = '$repository' AND $__timeFilter(night)
ORDER BY night DESC, severity DESC NULLS LAST
""",
                w=24,
                h=9,
            )
            .description(
                "Every case a nightly suspected in the time range, with the same night's A/B "
                "verdict (ratio and 95% CI, samples, device seconds) and its outcome: regression, "
                "improvement, checked noise, waiting or unconfirmed. Click a timing row for the "
                "case's history around that night."
            )
            .data_links(common.history_links())
        )
        .with_panel(
            common.table_panel(
                "Bisection steps",
                """
SELECT at, regression_id, step, verdict, probe_sha, good_sha, ratio, ci_low, ci_high,
  samples, gpu_seconds, device_model, host, note
FROM report_bisect_steps
WHERE repository = '$repository' AND $__timeFilter(at)
ORDER BY at DESC, step DESC
""",
                w=12,
                h=9,
            ).description(
                "Each bisection step in the time range: the probed commit against the good one, "
                "the A/B verdict with ratio and CI, samples and device seconds."
            )
        )
        .with_panel(
            common.table_panel(
                "Triage history",
                """
SELECT at, regression_id, title, state, actor, note
FROM report_regression_events
WHERE repository = '$repository' AND $__timeFilter(at)
ORDER BY at DESC
""",
                w=12,
                h=9,
            ).description(
                "Every triage event in the time range: who moved which regression to which state, "
                "and why."
            )
        )
    )
