"""Reading series history back for detection: the recent history points of every series of a
repository, with their raw samples, since the series' latest baseline reset. Unjudged
points (a CI wider than the margin they would be judged by) are left out: the level later
nights are compared with is made of judged nights only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

#: History points per series detection looks at. Change points further back were found (and
#: stored) by earlier passes; a window this size keeps a pass's cost flat as history grows.
WINDOW = 120


@dataclass(frozen=True)
class StoredRun:
    """One history point of a series as stored: the measurement, its commit and its raw
    samples (what ``kernelwatch.analysis.shift_test.SampledRun`` reads), the pool it ran on
    and its case's build identity (``analysis/aa_rate.py`` reads those)."""

    measurement_id: int
    run_pk: int
    commit_id: int | None
    commit_sha: str | None
    measured_at: datetime
    config: str | None
    status: str
    samples_ns: tuple[float, ...]
    throttled: tuple[bool, ...]
    sm_clock_mhz: tuple[float, ...]
    duration_s: float = 0.0
    pool: str | None = None
    build_identity: str | None = None


@dataclass(frozen=True)
class StoredSeries:
    """One series (one chart line) and its recent history points, oldest first."""

    series_id: int
    key: str
    kernel: str
    params: dict[str, Any]
    dtype: str
    device_model: str
    runs: tuple[StoredRun, ...]

    def label(self) -> str:
        """``kernel case dtype device``, for alert titles and tables."""
        case = " ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.kernel} {case} {self.dtype} {self.device_model}"


_HISTORY = """
WITH resets AS (
    SELECT s.id AS series_id, max(a.at) AS reset_at
    FROM series s
        JOIN kernels k ON k.id = s.kernel_id
        JOIN annotations a ON a.kind = 'baseline_reset'
            AND (a.series_id = s.id OR (a.series_id IS NULL AND a.repository_id = k.repository_id))
    WHERE k.repository_id = %(repository_id)s
    GROUP BY s.id
)
SELECT s.id, s.key, k.name, s.params, s.dtype, s.device_model,
    m.id, run.id, run.commit_id, c.sha, m.measured_at, cfg.label, m.status,
    rs.samples_ns, rs.throttled::text, rs.sm_clock_mhz, m.duration_s, run.pool,
    m.extra->>'build_identity'
FROM series s
    JOIN kernels k ON k.id = s.kernel_id
    LEFT JOIN resets r ON r.series_id = s.id
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT * FROM measurements
            WHERE series_id = s.id AND history AND NOT unjudged
                AND measured_at >= coalesce(r.reset_at, '-infinity')
            ORDER BY measured_at DESC, id DESC LIMIT %(window)s
        ) recent ORDER BY measured_at, id
    ) m
    JOIN runs run ON run.id = m.run_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id
    LEFT JOIN raw_samples rs ON rs.measurement_id = m.id
WHERE k.repository_id = %(repository_id)s
ORDER BY s.id, m.measured_at, m.id"""


def repository_id(conn: psycopg.Connection, repository: str) -> int | None:
    """The id of a stored repository, or None when nothing of it was ever ingested."""
    row = conn.execute("SELECT id FROM repositories WHERE name = %s", (repository,)).fetchone()
    return None if row is None else row[0]


def load_histories(
    conn: psycopg.Connection, repository_id: int, window: int = WINDOW
) -> list[StoredSeries]:
    """Every series of a repository with its last ``window`` history points after its latest
    baseline reset, oldest first."""
    series: list[StoredSeries] = []
    head: tuple[Any, ...] | None = None
    runs: list[StoredRun] = []
    rows = conn.execute(_HISTORY, {"repository_id": repository_id, "window": window})
    for row in rows:
        if head is not None and row[0] != head[0]:
            series.append(StoredSeries(*head, runs=tuple(runs)))
            runs = []
        head = row[:6]
        runs.append(
            StoredRun(
                measurement_id=row[6],
                run_pk=row[7],
                commit_id=row[8],
                commit_sha=row[9],
                measured_at=row[10],
                config=row[11],
                status=row[12],
                samples_ns=tuple(row[13] or ()),
                throttled=tuple(bit == "1" for bit in row[14] or ""),
                sm_clock_mhz=tuple(float(c) for c in row[15] or ()),
                duration_s=row[16],
                pool=row[17],
                build_identity=row[18],
            )
        )
    if head is not None:
        series.append(StoredSeries(*head, runs=tuple(runs)))
    return series


@dataclass(frozen=True)
class UnjudgedNights:
    """A kernel's unjudged history among a repository's recent nights on one pool: on how
    many of them it had a point stored unjudged, and the widest such point's relative CI
    half-width."""

    kernel: str
    nights: int
    of_nights: int
    widest: float


_UNJUDGED = """
WITH recent AS (
    SELECT run.id FROM runs run JOIN repositories repo ON repo.id = run.repository_id
    WHERE repo.name = %(repository)s AND run.pool IS NOT DISTINCT FROM %(pool)s
        AND run.trigger IN ('nightly', 'manual')
    ORDER BY run.started_at DESC LIMIT %(nights)s
)
SELECT k.name, count(DISTINCT m.run_id), (SELECT count(*) FROM recent),
    max(m.rel_ci_halfwidth)
FROM measurements m
    JOIN recent ON recent.id = m.run_id
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
WHERE m.unjudged AND k.name = ANY(%(kernels)s)
GROUP BY k.name
ORDER BY k.name"""


def unjudged_nights(
    conn: psycopg.Connection, repository: str, pool: str | None, kernels: list[str], nights: int
) -> list[UnjudgedNights]:
    """For each of ``kernels`` with an unjudged point among the repository's last ``nights``
    history runs on ``pool``: how many of those nights had one, and the widest."""
    rows = conn.execute(
        _UNJUDGED, {"repository": repository, "pool": pool, "kernels": kernels, "nights": nights}
    )
    return [UnjudgedNights(name, count, of, widest) for name, count, of, widest in rows]
