"""What a PR check concluded, kept for the PR dashboard: each case's A/B verdict, the static
findings and the correctness failures of the head, and where the comparison report is."""

from __future__ import annotations

import psycopg

from kernelwatch.report.compare import Comparison


def record_comparison(conn: psycopg.Connection, comparison: Comparison, report: str) -> int:
    """Store ``comparison``'s findings against its head and base runs; the rows written.
    Commits."""
    rows = [
        ("timing", c.head.kernel, c.head.case_label, c.head.dtype, c.verdict_name,
         *((c.verdict.ratio, c.verdict.ci_low, c.verdict.ci_high, c.verdict.p_value)
           if c.verdict is not None else (None, None, None, None)), c.problem)
        for c in comparison.cases
    ]  # fmt: skip
    rows += [
        ("static", f.kernel, f.case, f.dtype, f.rule, None, None, None, None, f.message)
        for f in comparison.static
    ]
    rows += [
        ("correctness", f.kernel, f.case_label, f.dtype, f.verdict, None, None, None, None,
         f.reason)
        for f in comparison.correctness_failures
    ]  # fmt: skip
    with conn.transaction(), conn.cursor() as cur:
        cur.execute(
            "SELECT (SELECT id FROM runs WHERE run_id = %s), "
            "(SELECT id FROM runs WHERE run_id = %s)",
            (comparison.head.run_id, comparison.base.run_id),
        )
        head, base = cur.fetchone()
        cur.executemany(
            """INSERT INTO pr_findings (head_run_id, base_run_id, kind, kernel, case_label, dtype,
                verdict, ratio, ci_low, ci_high, p_value, detail, report)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
            [(head, base, *row, report) for row in rows],
        )
    return len(rows)
