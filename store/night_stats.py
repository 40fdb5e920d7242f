"""What the dashboards read of the history, kept at ingest instead of counted per call.

Per night, kernel and method: how many cases a history run measured, the sum of their log
speedups over the stock library and of their %SOL (``night_kernel_stats``), so the quarter
view's family and kernel lines read a few thousand rows a year instead of scanning every
measurement of the range (``report_night_kernels``, ``report_night_families``; migration
0013). Per series: its history points (``series.history_points``, migration 0014)."""

from __future__ import annotations

import psycopg

#: The method of a series as the views spell it (``report_series.method``).
METHOD = "s.timer || '/' || s.l2 || '/h' || s.harness_version"

#: The rows of one run (its ``runs.id`` the only parameter), from its ok measurements.
ROWS = f"""
SELECT m.run_id, s.kernel_id, {METHOD}, min(m.measured_at), count(*),
    count(*) FILTER (WHERE m.speedup > 0),
    coalesce(sum(ln(m.speedup)) FILTER (WHERE m.speedup > 0), 0),
    count(m.pct_sol), coalesce(sum(m.pct_sol), 0)
FROM measurements m JOIN series s ON s.id = m.series_id
WHERE m.run_id = %s AND m.history AND m.status = 'ok'
GROUP BY m.run_id, s.kernel_id, {METHOD}"""

_INSERT = f"""
INSERT INTO night_kernel_stats (run_id, kernel_id, method, night, cases, speedup_cases,
    ln_speedup_sum, sol_cases, pct_sol_sum)
{ROWS}"""


#: Each series' history points, one more per point of the run (``series.history_points``,
#: migration 0014: the "too short to judge" count reads it).
_COUNT = """
UPDATE series s SET history_points = s.history_points + c.n
FROM (SELECT series_id, count(*) AS n FROM measurements WHERE run_id = %s AND history
      GROUP BY series_id) c
WHERE c.series_id = s.id"""


def add_night_stats(cur: psycopg.Cursor, run_pk: int) -> None:
    """Store the per-kernel sums of history run ``run_pk`` (already ingested) and count its
    points in their series."""
    cur.execute(_INSERT, (run_pk,))
    cur.execute(_COUNT, (run_pk,))
