"""The A/A pairs the nightly detection pass judges and the false-alarm rates it computes from
them (``analysis/aa_rate.py``): written in the pass's transaction, read back over a window
of nights."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import psycopg

from kernelwatch.analysis.aa_rate import AAJudged, AARate

#: The nights a rate is computed over.
WINDOW = timedelta(days=30)


@dataclass(frozen=True)
class AAPairRow:
    """One judged pair: the later measurement, the earlier one, where and what was said."""

    measurement_id: int
    before_id: int
    series_id: int
    pool: str
    device_model: str
    verdict: str
    ratio: float
    p_value: float
    measured_at: datetime


def insert_aa_pairs(cur: psycopg.Cursor, pairs: Sequence[AAPairRow]) -> None:
    """Store ``pairs``; a pair judged before (the same later measurement) is kept as it was."""
    cur.executemany(
        """INSERT INTO aa_pairs (measurement_id, before_id, series_id, pool, device_model,
            verdict, ratio, p_value, measured_at)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (measurement_id) DO NOTHING""",
        [
            (
                p.measurement_id,
                p.before_id,
                p.series_id,
                p.pool,
                p.device_model,
                p.verdict,
                p.ratio,
                p.p_value,
                p.measured_at,
            )
            for p in pairs
        ],
    )


def judged_pairs(cur: psycopg.Cursor, repository_id: int, until: datetime) -> list[AAJudged]:
    """The pairs of a repository's series judged over the :data:`WINDOW` before ``until``."""
    rows = cur.execute(
        """SELECT p.pool, p.device_model, p.verdict
        FROM aa_pairs p JOIN series s ON s.id = p.series_id JOIN kernels k ON k.id = s.kernel_id
        WHERE k.repository_id = %s AND p.measured_at > %s AND p.measured_at <= %s
        ORDER BY p.measurement_id""",
        (repository_id, until - WINDOW, until),
    ).fetchall()
    return [AAJudged(*row) for row in rows]


def insert_aa_rates(
    cur: psycopg.Cursor, repository_id: int, at: datetime, rates: Sequence[AARate]
) -> None:
    """Store one pass's ``rates``, computed ``at``."""
    cur.executemany(
        """INSERT INTO aa_rates (repository_id, computed_at, pool, device_model, pairs,
            different, rate, stated, p_value, flagged)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (repository_id, computed_at, pool, device_model) DO NOTHING""",
        [
            (
                repository_id,
                at,
                r.pool,
                r.device_model,
                r.pairs,
                r.different,
                r.rate,
                r.stated,
                r.p_value,
                r.flagged,
            )
            for r in rates
        ],
    )
