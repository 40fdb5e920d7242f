"""Pull requests: "is this PR safe to merge?" for one PR check (chosen by repository and head
SHA): every case's same-GPU A/B verdict with its ratio and CI, worst first, the static
findings and correctness failures of the head, each row linked to the comparison report."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.models.dashboard import DashboardLinkType

from kernelwatch.dashboards import common

UID = "kw-pr"

_CHECK = "repository = '$repository' AND run_id::text = '$check'"


def _report_link() -> list[sdk.DashboardLink]:
    return [
        sdk.DashboardLink("Comparison report")
        .type(DashboardLinkType.LINK)
        .url("${__data.fields.report}")
        .target_blank(True)
    ]


def dashboard() -> sdk.Dashboard:
    """The pull-request dashboard."""
    return (
        common.new_dashboard(
            UID,
            "kernelwatch: pull requests",
            "One PR check: every case's A/B verdict (head against base on the same GPU) with "
            "ratio and CI, static findings and correctness failures, linked to its report.",
            since="30d",
        )
        .with_variable(
            common.variable(
                "repository",
                "Repository",
                "SELECT DISTINCT repository FROM report_pr_findings ORDER BY 1",
            )
        )
        .with_variable(
            common.variable(
                "check",
                "Head SHA",
                """
SELECT DISTINCT left(head_sha, 12) || ' on ' || device_model || ' at '
    || to_char(started_at, 'YYYY-MM-DD HH24:MI') AS __text, run_id AS __value
FROM report_pr_findings
WHERE repository = '$repository' AND $__timeFilter(started_at)
""",
            )
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
                "Cases per A/B verdict: SLOWER and AMBIGUOUS need a look before merging; "
                "ERROR means a side could not be measured."
            )
            .reduce_options(common.row_values())
            .unit("none")
        )
        .with_panel(
            common.table_panel(
                "A/B verdicts, slowest first",
                f"""
SELECT kernel, case_label, dtype, device_model, verdict, ratio, ci_low, ci_high, p_value,
  detail, base_sha, head_sha, report
FROM report_pr_findings
WHERE {_CHECK} AND kind = 'timing'
ORDER BY ratio DESC NULLS FIRST
""",
                w=24,
                h=12,
            )
            .description(
                "Head median over base median on the same GPU in one session, with its 95% "
                "bootstrap CI; a ratio above 1 is slower. Click a row for the comparison report."
            )
            .decimals(3)
            .data_links(_report_link())
        )
        .with_panel(
            common.table_panel(
                "Static findings and correctness failures",
                f"""
SELECT kind, kernel, case_label, dtype, verdict, detail, report
FROM report_pr_findings
WHERE {_CHECK} AND kind <> 'timing'
ORDER BY kind, kernel
""",
                w=24,
                h=8,
            )
            .description(
                "Builds of the head that lost a tensor-core path, spill or grew (static), and "
                "cases whose output no longer matches the float64 reference (correctness)."
            )
            .data_links(_report_link())
        )
    )
