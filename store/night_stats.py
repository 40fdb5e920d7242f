"""What the dashboards read of the history, kept at ingest instead of counted per call.

Per night, kernel and method: how many cases a history run measured, the sums of their log
speedups over the stock library and of their %SOL (``night_kernel_stats``), so the quarter
view's family and kernel lines read a few thousand rows a year instead of scanning every
measurement of the range (``report_night_kernels``, ``report_night_families``; migration
0013). Per series: its history points, counted up to :data:`POINTS_CAP`
(``series_points``, migration 0014), for the "too short to judge" count.

Both come from the records being ingested, not from reading back what was just stored: the
aggregate as a query over the run's rows cost 16 ms a 2,000-case run, and a counter on
``series`` 61 ms (2,000 row versions of a wide, indexed table), against ~42 ms for the
whole run's ingest.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime

import psycopg

from kernelwatch.harness.records import Measurement

#: A series' points are counted up to here: the "too short to judge" count needs fewer (a
#: test holds the dashboards' threshold under it), and a grown series is never written again.
POINTS_CAP = 100


@dataclass
class KernelNight:
    """One kernel's ok cases of one run measured by one method, and their sums."""

    kernel_id: int
    method: str
    cases: int = 0
    speedup_cases: int = 0
    ln_speedup_sum: float = 0.0
    sol_cases: int = 0
    pct_sol_sum: float = 0.0


def kernel_nights(
    records: Sequence[Measurement], kernel_ids: Mapping[tuple[str, str], int]
) -> list[KernelNight]:
    """Per kernel (``kernel_ids`` by suite and name) and method, the ok records' sums."""
    found: dict[tuple[int, str], KernelNight] = {}
    for m in records:
        if m.status != "ok":
            continue
        kernel_id = kernel_ids[m.case.suite, m.case.kernel]
        key = (kernel_id, m.method.label())
        night = found.get(key) or found.setdefault(key, KernelNight(*key))
        night.cases += 1
        if m.speedup is not None and m.speedup > 0:
            night.speedup_cases += 1
            night.ln_speedup_sum += math.log(m.speedup)
        if m.sol is not None and m.sol.pct_sol is not None:
            night.sol_cases += 1
            night.pct_sol_sum += m.sol.pct_sol
    return list(found.values())


_INSERT = """
INSERT INTO night_kernel_stats (run_id, night, kernel_id, method, cases, speedup_cases,
    ln_speedup_sum, sol_cases, pct_sol_sum)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"""

# Only the young series are written: a grown one (POINTS_CAP points) is left as it is.
_GROW = f"""
UPDATE series_points p SET points = least(p.points + r.n, {POINTS_CAP})
FROM unnest(%s::int[], %s::int[]) AS r(series_id, n)
WHERE p.series_id = r.series_id AND p.points < {POINTS_CAP}"""
_FIRST = f"""
INSERT INTO series_points (series_id, points)
SELECT r.series_id, least(r.n, {POINTS_CAP}) FROM unnest(%s::int[], %s::int[]) AS r(series_id, n)
WHERE NOT EXISTS (SELECT 1 FROM series_points p WHERE p.series_id = r.series_id)"""


def add_night_stats(
    cur: psycopg.Cursor,
    run_pk: int,
    night: datetime,
    nights: Sequence[KernelNight],
    series_ids: Sequence[int],
) -> None:
    """Store history run ``run_pk``'s kernel sums and count its points in their series."""
    cur.executemany(_INSERT, [(run_pk, night, *astuple(n)) for n in nights])
    points: dict[int, int] = defaultdict(int)
    for series_id in series_ids:
        points[series_id] += 1
    ids, counts = list(points), list(points.values())
    cur.execute(_GROW, (ids, counts))
    cur.execute(_FIRST, (ids, counts))
