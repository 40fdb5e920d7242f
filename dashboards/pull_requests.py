"""Pull requests: "is this PR safe to merge?" for one PR check (chosen by repository and head
SHA): every case's same-GPU A/B verdict with its ratio and CI, worst first, the static
findings and correctness failures of the head, each row linked to the comparison report."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.models.dashboard import DashboardLinkType

from kernelwatch.dashboards import common

UID = "kw-pr"

#: One check: every GPU that ran the chosen pull request's head.
_CHECK = "repository = '$repository' AND head_sha = '$check'"


def _report_link() -> list[sdk.DashboardLink]:
    return [
        sdk.DashboardLink("Comparison report")
        .type(DashboardLinkType.LINK)
        .url("${__data.fields.report_url}")
        .target_blank(True)
    ]


def dashboard() -> sdk.Dashboard:
    """The pull-request dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: pull requests",
            "One PR check on every GPU that ran it: the merge verdict the comment gave, every "
            "case's A/B verdict (head against base on the same GPU) with both medians, ratio "
            "and CI, static findings and correctness failures, linked to its report.",
            since="30d",
        )
        .with_variable(
            common.variable(
                "repository",
                "Repository",
                "SELECT DISTINCT repository FROM report_pr_checks ORDER BY 1",
            )
        )
        .with_variable(
            common.variable(
                "check",
                "Pull request",
                """
SELECT pr || CASE WHEN branch <> '' THEN ' ' || branch ELSE '' END
    || CASE WHEN author <> '' THEN ' by ' || author ELSE '' END
    || ' at ' || left(head_sha, 12) || ' (' || count(*) || ' GPU'
    || CASE WHEN count(*) > 1 THEN 's' ELSE '' END || ', '
    || to_char(max(started_at), 'YYYY-MM-DD HH24:MI') || ')' AS __text,
  head_sha AS __value
FROM report_pr_checks
WHERE repository = '$repository' AND $__timeFilter(started_at)
GROUP BY pr, branch, author, head_sha
ORDER BY max(started_at) DESC
""",
                in_query_order=True,
            )
        )
        .with_panel(
            common.table_panel(
                "Merge verdict, per GPU",
                f"""
SELECT pr, branch, author, device_model, host, outcome, merge_verdict, base_sha, head_sha,
  started_at, report_url
FROM report_pr_checks
WHERE {_CHECK}
ORDER BY outcome DESC, device_model
""",
                w=24,
                h=5,
            )
            .description(
                "What the PR comment said, on each GPU the check ran on: outcome 0 no "
                "regression, 1 regression (a case slower, a static regression or a "
                "correctness failure at head), 2 no verdict, 3 inconclusive (none slower, "
                "a case still AMBIGUOUS after more samples). report_url is empty where no "
                "[run] report_url serves the report folder. Click a row for the report."
            )
            .data_links(_report_link())
        )
        .with_panel(
            common.stat_panel(
                "Verdicts of this check",
                f"""
SELECT verdict, count(*) AS cases
FROM report_pr_findings
WHERE {_CHECK} AND kind = 'timing'
GROUP BY verdict
ORDER BY verdict
""",
                w=24,
                h=4,
            )
            .description(
                "Cases per A/B verdict over every GPU: SLOWER and AMBIGUOUS need a look before "
                "merging; ERROR means a side could not be measured; IDENTICAL, the same build "
                "at base and head (code, launches, inputs), so not timed."
            )
            .reduce_options(common.row_values())
            .unit("none")
        )
        .with_panel(
            common.table_panel(
                "A/B verdicts, slowest first",
                f"""
SELECT kernel, case_label, dtype, device_model, verdict, base_ns / 1e3 AS base_us,
  head_ns / 1e3 AS head_us, ratio, ci_low, ci_high, p_value, detail, base_sha, head_sha,
  report_url
FROM report_pr_findings
WHERE {_CHECK} AND kind = 'timing'
ORDER BY verdict = 'IDENTICAL', ratio DESC NULLS FIRST
""",
                w=24,
                h=12,
            )
            .description(
                "Head median over base median on the same GPU in one session, with its 95% "
                "bootstrap CI and the test's p-value; a ratio above 1 is slower. base_us and "
                "head_us are the two medians; IDENTICAL cases (the same build at both sides) "
                "were not timed and come last. Click a row for the comparison report."
            )
            .decimals(3)
            .data_links(_report_link())
            .override_by_name("base_us", [common.unit("µs")])
            .override_by_name("head_us", [common.unit("µs")])
            .override_by_name("p_value", [common.unit("sci")])
        )
        .with_panel(
            common.table_panel(
                "Static findings and correctness failures",
                f"""
SELECT kind, kernel, function, arch, case_label, dtype, device_model, verdict,
  before_value, after_value, detail, report_url
FROM report_pr_findings
WHERE {_CHECK} AND kind <> 'timing'
ORDER BY kind, kernel, function, arch
""",
                w=24,
                h=8,
            )
            .description(
                "Builds of the head that lost a tensor-core path, spill or grew (static: the "
                "function and arch built, the value before and after), and cases whose output "
                "no longer matches the float64 reference (correctness)."
            )
            .data_links(_report_link())
        )
    )
