"""What the nightly's same-night confirmation reads and writes: tonight's run and the previous
nightly run it is judged against, the points already checked, and one ``night_suspects`` row
per suspect (migration 0005), the morning-after record the dashboards read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import psycopg
from psycopg.rows import dict_row


@dataclass(frozen=True)
class NightRun:
    """A stored nightly run: its ids, repository, suite, commit and GPU model."""

    pk: int
    run_id: str
    repository_id: int
    repository: str
    suite: str
    commit_id: int
    sha: str
    device_model: str


@dataclass(frozen=True)
class SuspectRow:
    """One suspect as stored. ``severity`` orders timing confirmations (null otherwise); the
    A/B fields are set when an A/B measured it; ``regression_id`` when it opened or joined
    one."""

    run_pk: int
    repository_id: int
    kind: str
    kernel: str
    case_label: str
    dtype: str
    head_commit_id: int
    suspicion: str
    outcome: str
    base_commit_id: int | None = None
    series_id: int | None = None
    measurement_id: int | None = None
    severity: float | None = None
    verdict: str | None = None
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p_value: float | None = None
    samples: int = 0
    rounds: int = 0
    gpu_seconds: float = 0.0
    regression_id: int | None = None
    note: str = ""


_RUN = """
SELECT r.id, r.run_id::text, r.repository_id, repo.name, r.suite, r.commit_id, c.sha, d.model
FROM runs r JOIN commits c ON c.id = r.commit_id JOIN devices d ON d.id = r.device_id
    JOIN repositories repo ON repo.id = r.repository_id"""

_COLUMNS = (
    "run_id", "repository_id", "kind", "kernel_id", "series_id", "measurement_id",
    "case_label", "dtype", "base_commit_id", "head_commit_id", "severity", "suspicion",
    "verdict", "ratio", "ci_low", "ci_high", "p_value", "samples", "rounds", "gpu_seconds",
    "outcome", "regression_id", "note",
)  # fmt: skip


def night_run(conn: psycopg.Connection, run_id: str) -> NightRun | None:
    """The stored run ``run_id`` (a uuid), or None when it is not stored (spooled)."""
    row = conn.execute(f"{_RUN} WHERE r.run_id = %s", (run_id,)).fetchone()
    return None if row is None else NightRun(*row)


def previous_nightly(conn: psycopg.Connection, tonight: NightRun) -> NightRun | None:
    """The nightly run before ``tonight`` of the same repository on the same GPU model that
    measured something (ok or partial) at another commit: the previous nightly head."""
    row = conn.execute(
        f"""{_RUN}
        WHERE r.repository_id = %s AND d.model = %s AND r.trigger = 'nightly'
            AND r.status IN ('ok', 'partial') AND r.id <> %s AND r.commit_id <> %s
            AND r.started_at <= (SELECT started_at FROM runs WHERE id = %s)
        ORDER BY r.started_at DESC, r.id DESC LIMIT 1""",
        (tonight.repository_id, tonight.device_model, tonight.pk, tonight.commit_id, tonight.pk),
    ).fetchone()
    return None if row is None else NightRun(*row)


def checked_points(conn: psycopg.Connection, series_ids: Sequence[int]) -> set[int]:
    """Measurement ids of the points an A/B found to be noise (``checked_noise``)."""
    rows = conn.execute(
        "SELECT measurement_id FROM night_suspects "
        "WHERE series_id = ANY(%s) AND outcome = 'checked_noise'",
        (list(series_ids),),
    )
    return {row[0] for row in rows}


def commit_id(conn: psycopg.Connection, repository_id: int, sha: str) -> int | None:
    """The id of a stored commit of a repository."""
    row = conn.execute(
        "SELECT id FROM commits WHERE repository_id = %s AND sha = %s", (repository_id, sha)
    ).fetchone()
    return None if row is None else row[0]


def insert_suspects(cur: psycopg.Cursor, suite: str, rows: Sequence[SuspectRow]) -> None:
    """Store the night's suspects (the kernels by name in the run's suite)."""
    for row in rows:
        kernel_id = cur.execute(
            "SELECT id FROM kernels WHERE repository_id = %s AND suite = %s AND name = %s",
            (row.repository_id, suite, row.kernel),
        ).fetchone()[0]
        values = (
            row.run_pk, row.repository_id, row.kind, kernel_id, row.series_id,
            row.measurement_id, row.case_label, row.dtype, row.base_commit_id,
            row.head_commit_id, row.severity, row.suspicion, row.verdict, row.ratio,
            row.ci_low, row.ci_high, row.p_value, row.samples, row.rounds, row.gpu_seconds,
            row.outcome, row.regression_id, row.note,
        )  # fmt: skip
        cur.execute(
            f"INSERT INTO night_suspects ({', '.join(_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(_COLUMNS))})",
            values,
        )


def regression_cases(
    conn: psycopg.Connection, regression_id: int, kind: str
) -> set[tuple[str, str, str]]:
    """The (kernel, case, dtype) of a regression's suspects of ``kind``."""
    rows = conn.execute(
        "SELECT k.name, ns.case_label, ns.dtype FROM night_suspects ns "
        "JOIN kernels k ON k.id = ns.kernel_id WHERE ns.regression_id = %s AND ns.kind = %s",
        (regression_id, kind),
    )
    return {(r[0], r[1], r[2]) for r in rows}


def run_suspects(conn: psycopg.Connection, run_id: str) -> list[dict[str, object]]:
    """The suspects of one nightly run as ``report_night_suspects`` shows them, the ones
    that opened or joined a regression first, then by severity."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(
            "SELECT * FROM report_night_suspects WHERE run_id = %s "
            "ORDER BY regression_id IS NULL, severity DESC NULLS LAST, suspect_id",
            (run_id,),
        ).fetchall()
