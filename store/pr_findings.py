"""What a PR check concluded, kept for the PR dashboard (``pr_findings``): each case's A/B
verdict, the static findings and the correctness failures of the head, and where the
comparison report is."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

import psycopg


@dataclass(frozen=True)
class PrFinding:
    """One finding: ``kind`` timing (``verdict`` the A/B verdict, with ratio, CI and
    p-value), static (``verdict`` the rule) or correctness (the check's verdict)."""

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


def insert_pr_findings(
    conn: psycopg.Connection,
    head_run_id: str,
    base_run_id: str,
    findings: Sequence[PrFinding],
    report: str,
) -> None:
    """Store ``findings`` of the check of run ``head_run_id`` against ``base_run_id``.
    Commits."""
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT (SELECT id FROM runs WHERE run_id = %s), "
            "(SELECT id FROM runs WHERE run_id = %s)",
            (head_run_id, base_run_id),
        )
        head, base = cur.fetchone()
        cur.executemany(
            """INSERT INTO pr_findings (head_run_id, base_run_id, kind, kernel, case_label, dtype,
                verdict, ratio, ci_low, ci_high, p_value, detail, report)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [(head, base, *astuple(f), report) for f in findings],
        )
