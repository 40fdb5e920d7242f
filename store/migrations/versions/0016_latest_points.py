"""Each series' latest nightly point kept at ingest, so "the latest nightly" panels read one
row per series instead of joining the latest runs' measurements to their series, kernels,
commits and configs per call (issue 30: 15-60 ms at fleet scale against 10 ms).

- ``latest_points``: per series its latest history point of an ``ok`` or ``partial`` run
  with what the panels show of it (the series' names, the run's night, commit and status,
  the measurement's numbers), and the point before it (run, night, status, median, commit).
  ``latest_points_add(run)`` files a stored run's points in it, whatever order runs arrive
  in: a point newer than a series' latest becomes it (the latest moves to ``previous``), one
  between the two becomes the previous point, an older one changes nothing (and writes
  nothing). The ingest calls it in the run's transaction. The points stored before are
  filed here per series from its two newest points (one call per run, oldest first, took
  8 minutes on a year of fleet history: every call rewrote 2,000 rows in one transaction).
  Where a run measured a series twice (two GPUs of one model) its last point counts.
- ``report_nightly_latest``, ``report_nightly_kernels``, ``report_night_comparison`` and
  ``report_kernel_drift`` (``store/views/``) read it: the same rows as from the measurements.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"
HISTORY_RUN = "r.trigger IN ('nightly', 'manual') AND r.status IN ('ok', 'partial')"

#: What a series' row holds of its latest point: (column, type, what it is read from).
LATEST = (
    ("run_pk", "bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE", "r.id"),
    ("run_id", "uuid NOT NULL", "r.run_id"),
    ("night", "timestamptz NOT NULL", "r.started_at"),
    ("commit_sha", "text", "c.sha"),
    ("run_status", "text NOT NULL", "r.status"),
    ("measurement_id", "bigint NOT NULL", "m.id"),
    ("status", "text NOT NULL", "m.status"),
    ("median_ns", "double precision", "m.median_ns"),
    ("ci_low_ns", "double precision", "m.ci_low_ns"),
    ("ci_high_ns", "double precision", "m.ci_high_ns"),
    ("rel_ci_halfwidth", "double precision", "m.rel_ci_halfwidth"),
    ("tflops", "double precision", "m.tflops"),
    ("gbps", "double precision", "m.gbps"),
    ("pct_compute", "double precision", "m.pct_compute"),
    ("pct_memory", "double precision", "m.pct_memory"),
    ("pct_sol", "double precision", "m.pct_sol"),
    ("bound", "text", "m.bound"),
    ("baseline", "text", "m.baseline"),
    ("baseline_median_ns", "double precision", "m.baseline_median_ns"),
    ("speedup", "double precision", "m.speedup"),
    ("config", "text", "cfg.label"),
)
#: The point before the latest: (column, type, the latest column it was).
PREVIOUS = (
    ("previous_run_pk", "bigint", "run_pk"),
    ("previous_night", "timestamptz", "night"),
    ("previous_status", "text", "status"),
    ("previous_median_ns", "double precision", "median_ns"),
    ("previous_sha", "text", "commit_sha"),
)
#: The series' names, which never change.
SERIES = (
    ("series_id", "int PRIMARY KEY REFERENCES series(id) ON DELETE CASCADE", "s.id"),
    ("series_key", "text NOT NULL", "s.key"),
    ("repository_id", "int NOT NULL", "repo.id"),
    ("repository", "text NOT NULL", "repo.name"),
    ("suite", "text NOT NULL", "k.suite"),
    ("kernel", "text NOT NULL", "k.name"),
    ("workload", "text NOT NULL", "s.workload"),
    ("case_label", "text NOT NULL", "s.case_label"),
    ("dtype", "text NOT NULL", "s.dtype"),
    ("device_model", "text NOT NULL", "s.device_model"),
    ("method", "text NOT NULL", "s.timer || '/' || s.l2 || '/h' || s.harness_version"),
)


def _table() -> str:
    columns = ",\n    ".join(f"{name} {kind}" for name, kind, _ in (*SERIES, *LATEST, *PREVIOUS))
    return f"""
CREATE TABLE latest_points (
    {columns}
) WITH (fillfactor = 50);"""


def _add_function() -> str:
    named = [name for name, _, _ in (*SERIES, *LATEST)]
    read = ", ".join(source for _, _, source in (*SERIES, *LATEST))
    newer = "EXCLUDED.night > lp.night"
    between = "EXCLUDED.night > coalesce(lp.previous_night, '-infinity')"
    sets = [f"{name} = CASE WHEN {newer} THEN EXCLUDED.{name} ELSE lp.{name} END"
            for name, _, _ in LATEST]  # fmt: skip
    sets += [
        f"{name} = CASE WHEN {newer} THEN lp.{was} WHEN {between} THEN EXCLUDED.{was} "
        f"ELSE lp.{name} END"
        for name, _, was in PREVIOUS
    ]
    assignments = ",\n    ".join(sets)
    return f"""
CREATE FUNCTION latest_points_add(run bigint) RETURNS void LANGUAGE sql AS $fn$
INSERT INTO latest_points AS lp ({", ".join(named)})
SELECT DISTINCT ON (s.id) {read}
FROM runs r
    JOIN measurements m ON m.run_id = r.id AND m.history
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    LEFT JOIN commits c ON c.id = r.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id
WHERE r.id = run AND {HISTORY_RUN}
ORDER BY s.id, m.id DESC
ON CONFLICT (series_id) DO UPDATE SET
    {assignments}
WHERE {newer} OR ({between} AND EXCLUDED.night < lp.night)
$fn$;
GRANT EXECUTE ON FUNCTION latest_points_add(bigint) TO {WRITER};"""


def _point(series: str, before: str = "") -> str:
    """The id of ``series``' newest history point (``before`` a night, when given)."""
    return f"""(SELECT m.id FROM measurements m JOIN runs r ON r.id = m.run_id
        WHERE m.series_id = {series} AND m.history AND {HISTORY_RUN}{before}
        ORDER BY m.measured_at DESC, m.id DESC LIMIT 1)"""


def _backfill() -> list[str]:
    """The rows of the points stored before this migration: each series' newest point, then
    the one before it."""
    named = ", ".join(name for name, _, _ in (*SERIES, *LATEST))
    read = ", ".join(source for _, _, source in (*SERIES, *LATEST))
    sources = {name: source for name, _, source in LATEST}
    previous = ", ".join(name for name, _, _ in PREVIOUS)
    was = ", ".join(sources[w] for _, _, w in PREVIOUS)
    joins = """JOIN runs r ON r.id = m.run_id
        LEFT JOIN commits c ON c.id = r.commit_id
        LEFT JOIN configs cfg ON cfg.id = m.config_id"""
    return [
        f"""INSERT INTO latest_points ({named})
SELECT {read}
FROM series s
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    JOIN measurements m ON m.id = {_point("s.id")}
    {joins}""",
        f"""UPDATE latest_points lp SET ({previous}) = (
    SELECT {was} FROM measurements m {joins}
    WHERE m.id = {_point("lp.series_id", " AND m.measured_at < lp.night")})""",
    ]


def upgrade() -> None:
    op.execute(_table())
    op.execute(_add_function())
    for statement in _backfill():
        op.execute(statement)
    op.execute("ANALYZE latest_points")


def downgrade() -> None:
    op.execute("DROP FUNCTION latest_points_add(bigint);")
    op.execute("DROP TABLE latest_points;")
