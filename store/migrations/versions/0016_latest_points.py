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
- ``report_nightly_latest`` and ``report_nightly_kernels`` read it, restricted to the latest
  run per repository and GPU model as before, so the same rows come back.
- ``report_night_comparison``: the latest night against the previous one from the series'
  two points (the previous point must be of the previous night's run, as before).
- ``report_kernel_drift``: the latest side from it; the first nightly of the range is still
  read from the measurements, since the range is the caller's.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
WRITER = "kernelwatch_writer"
_VERSIONS = "kernelwatch.store.migrations.versions"
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


_LATEST_RUNS = "(SELECT run_pk FROM report_latest_nightly_runs)"

NIGHTLY_LATEST = f"""
SELECT series_key, repository, suite, kernel, workload, case_label, dtype, device_model,
    method, run_id, night AS measured_at, commit_sha, status, median_ns, ci_low_ns,
    ci_high_ns, rel_ci_halfwidth, tflops, gbps, pct_compute, pct_memory, pct_sol, bound,
    baseline, baseline_median_ns, speedup, config, run_status
FROM latest_points
WHERE run_pk IN {_LATEST_RUNS}"""

# 0014's comparison with the series' two points read from latest_points.
_COMPARISON_EDITS = (
    ("""    JOIN measurements m ON m.run_id = l.run_pk AND m.status = 'ok' AND m.median_ns > 0
    JOIN measurements pm ON pm.run_id = p.run_pk AND pm.series_id = m.series_id
        AND pm.status = 'ok' AND pm.median_ns > 0
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    LEFT JOIN suspects ns ON ns.run_id = l.run_pk AND ns.series_id = m.series_id""",
     """    JOIN latest_points lp ON lp.run_pk = l.run_pk AND lp.previous_run_pk = p.run_pk
        AND lp.status = 'ok' AND lp.median_ns > 0
        AND lp.previous_status = 'ok' AND lp.previous_median_ns > 0
    LEFT JOIN suspects ns ON ns.run_id = l.run_pk AND ns.series_id = lp.series_id"""),
    ("""SELECT s.key AS series_key, l.repository, k.name AS kernel, s.dtype, s.case_label,
    s.device_model, s.timer || '/' || s.l2 || '/h' || s.harness_version AS method, l.run_id,""",
     """SELECT lp.series_key, l.repository, lp.kernel, lp.dtype, lp.case_label,
    lp.device_model, lp.method, l.run_id,"""),
    ("pm.median_ns AS previous_ns,\n    m.median_ns AS latest_ns, m.median_ns / pm.median_ns",
     "lp.previous_median_ns AS previous_ns,\n    lp.median_ns AS latest_ns,"
     " lp.median_ns / lp.previous_median_ns"),
)  # fmt: skip

DRIFT_SIGNATURE = "report_kernel_drift(since timestamptz)"
DRIFT = f"""
WITH baseline AS (
    SELECT DISTINCT ON (repo.id, d.model) r.id AS run_pk, r.started_at
    FROM repositories repo
        CROSS JOIN devices d
        CROSS JOIN LATERAL (
            SELECT id, started_at FROM runs
            WHERE device_id = d.id AND repository_id = repo.id
                AND trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial')
                AND started_at >= since
            ORDER BY started_at LIMIT 1
        ) r
    ORDER BY repo.id, d.model, r.started_at
), points AS (
    SELECT m.series_id, m.median_ns, b.started_at
    FROM baseline b JOIN measurements m ON m.run_id = b.run_pk
    WHERE m.status = 'ok' AND m.median_ns > 0
)
SELECT lp.repository, lp.device_model, lp.kernel, count(*), max(lp.night), max(b.started_at),
    exp(avg(ln(lp.median_ns / b.median_ns))), max(lp.median_ns / b.median_ns)
FROM latest_points lp JOIN points b ON b.series_id = lp.series_id
WHERE lp.run_pk IN {_LATEST_RUNS} AND lp.status = 'ok' AND lp.median_ns > 0
GROUP BY lp.repository, lp.device_model, lp.kernel"""


def _comparison(body: str) -> str:
    for old, new in _COMPARISON_EDITS:
        if body.count(old) != 1:
            raise ValueError(f"0014's night comparison changed: {old[:60]!r}")
        body = body.replace(old, new)
    return body


def _function(signature: str, returns: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {signature} RETURNS {returns} LANGUAGE sql STABLE "
        f"SECURITY DEFINER SET search_path = public, pg_temp AS $fn${body}$fn$;"
    )


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
    morning = importlib.import_module(f"{_VERSIONS}.0014_fleet_scale").NIGHT_COMPARISON
    op.execute(f"CREATE OR REPLACE VIEW report_nightly_latest AS {NIGHTLY_LATEST};")
    op.execute(f"CREATE OR REPLACE VIEW report_night_comparison AS {_comparison(morning)};")
    returns = importlib.import_module(f"{_VERSIONS}.0004_dashboards").FUNCTIONS[DRIFT_SIGNATURE][0]
    op.execute(_function(DRIFT_SIGNATURE, returns, DRIFT))


def downgrade() -> None:
    dashboards = importlib.import_module(f"{_VERSIONS}.0004_dashboards")
    honest = importlib.import_module(f"{_VERSIONS}.0009_honest_dashboards")
    morning = importlib.import_module(f"{_VERSIONS}.0014_fleet_scale").NIGHT_COMPARISON
    op.execute(_function(DRIFT_SIGNATURE, *dashboards.FUNCTIONS[DRIFT_SIGNATURE]))
    op.execute(f"CREATE OR REPLACE VIEW report_night_comparison AS {morning};")
    latest = honest.VIEWS["report_nightly_latest"]
    op.execute(f"CREATE OR REPLACE VIEW report_nightly_latest AS {latest};")
    op.execute("DROP FUNCTION latest_points_add(bigint);")
    op.execute("DROP TABLE latest_points;")
