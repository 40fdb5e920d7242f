"""What a PR check concluded, kept for the PR dashboard: the check (``pr_checks``: the pull
request, the merge verdict the comment gave and the report's URL) and its findings
(``pr_findings``: each case's A/B verdict with both medians, the static findings and the
correctness failures of the head)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

import psycopg


@dataclass(frozen=True)
class PrFinding:
    """One finding: ``kind`` timing (``verdict`` the A/B verdict, with ratio, CI, p-value and
    both medians), static (``verdict`` the rule, with the build's arch and function and the
    value before and after) or correctness (the check's verdict)."""

    kind: str
    kernel: str
    case_label: str
    dtype: str
    verdict: str
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    detail: str = ""
    base_ns: float | None = None
    head_ns: float | None = None
    arch: str = ""
    function: str = ""
    before_value: str = ""
    after_value: str = ""


@dataclass(frozen=True)
class PrCheck:
    """One PR check on one GPU: the pull request it was for (``pr_number`` None when the
    check was run by hand on two revisions), the merge verdict (the comment's outcome 0/1/2/3
    and its words) and the report's URL (None where no URL serves it)."""

    outcome: int
    verdict: str
    report_url: str | None
    pr_number: int | None = None
    branch: str = ""
    author: str = ""


def insert_pr_check(
    conn: psycopg.Connection,
    head_run_id: str,
    base_run_id: str,
    check: PrCheck,
    findings: Sequence[PrFinding],
) -> None:
    """Store the check of run ``head_run_id`` against ``base_run_id`` and its ``findings``
    (a check stored before is replaced). Commits."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT (SELECT id FROM runs WHERE run_id = %s), "
            "(SELECT id FROM runs WHERE run_id = %s)",
            (head_run_id, base_run_id),
        )
        head, base = cur.fetchone()
        cur.execute("DELETE FROM pr_checks WHERE head_run_id = %s", (head,))
        cur.execute("DELETE FROM pr_findings WHERE head_run_id = %s", (head,))
        cur.execute(
            """INSERT INTO pr_checks (head_run_id, base_run_id, pr_number, branch, author,
                outcome, verdict, report)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s)""",
            (
                head,
                base,
                check.pr_number,
                check.branch,
                check.author,
                check.outcome,
                check.verdict,
                check.report_url,
            ),
        )
        cur.executemany(
            """INSERT INTO pr_findings (head_run_id, base_run_id, kind, kernel, case_label, dtype,
                verdict, ratio, ci_low, ci_high, p_value, detail, base_ns, head_ns, arch,
                function, before_value, after_value)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [(head, base, *astuple(f)) for f in findings],
        )
