"""The latest-nightly panels without a pass over every case per call (issue 30: the morning
panel at 22-31 ms and the %SOL heat map at 10-14 ms against 10 ms, at fleet scale, where any
pass over 6,000 wide rows costs 5-10 ms on its own).

- ``runs_history_idx``: the history runs (nightly or manual, ok or partial) per device and
  repository in time order, so "the latest nightly of each GPU model" and the one before it
  are a few index entries each instead of a walk over every run of the device (1 ms of every
  latest-nightly panel).
- ``night_movers``: per latest nightly run of each repository and GPU model, the
  :data:`MOVERS` cases whose median rose most against the nightly before it (the order the
  morning panel lists its unsuspected rows in), refreshed by ``night_movers_refresh(run)``
  in every history run's ingest transaction for that run's repository and GPU model, from
  ``latest_points``, so it holds whatever order runs arrive in.
- ``report_night_comparison_top``: ``report_night_comparison`` limited to the rows the
  morning panel can show: every suspected series and each latest run's movers. Its first
  ``MOVERS`` rows in the panel's order are the full view's (a test holds the panel's row
  count under ``MOVERS``).
- ``report_nightly_kernels``: from the per-run kernel sums kept at ingest
  (``night_kernel_stats``) of the latest runs, the same rows as from their points.
- ``report_latest_nightly_runs`` and ``report_night_comparison``: two GPUs' runs of one model
  at the same time resolved to the larger run id, as the movers are.
- ``jit = off`` for the database (where the migration may set it): every query kernelwatch
  runs is short, and a compile cost 1.5 s an ingest where a never-analysed small table's
  default estimates crossed JIT's cost threshold.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
WRITER = "kernelwatch_writer"
_VERSIONS = "kernelwatch.store.migrations.versions"
#: Unsuspected cases kept per latest run, most slowed first: the most the morning panel lists.
MOVERS = 200

INDEX = """
CREATE INDEX runs_history_idx ON runs (device_id, repository_id, started_at)
    WHERE trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial');"""

TABLE = f"""
CREATE TABLE night_movers (
    run_pk       bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    series_id    int NOT NULL REFERENCES series(id) ON DELETE CASCADE,
    night_ratio  double precision NOT NULL,
    PRIMARY KEY (run_pk, series_id)
);
GRANT DELETE ON night_movers TO {WRITER};"""

_HISTORY = "trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial')"

# The latest history run of the run's repository and GPU model and the one before it, as
# report_latest_nightly_runs and report_night_comparison pick them (the latest on any GPU
# of the model; ties to the larger id), and the latest's points whose previous point is of
# that run: the pair's movers are replaced, whichever run they were of. Written against
# the model's few devices, not those views' every repository x device: on a store whose
# small tables were never analysed (autovacuum's threshold is 50 changed rows) the views'
# estimates passed JIT's threshold and each ingest spent 1.5 s compiling this.
REFRESH = f"""
CREATE FUNCTION night_movers_refresh(run bigint) RETURNS void LANGUAGE sql
SET jit = off AS $fn$
DELETE FROM night_movers WHERE run_pk IN (
    SELECT r.id FROM runs this
        JOIN devices td ON td.id = this.device_id
        JOIN devices d ON d.model = td.model
        JOIN runs r ON r.device_id = d.id AND r.repository_id = this.repository_id
    WHERE this.id = run);
INSERT INTO night_movers (run_pk, series_id, night_ratio)
WITH this AS (
    SELECT r.repository_id, d.model FROM runs r JOIN devices d ON d.id = r.device_id
    WHERE r.id = run
), latest AS (
    SELECT l.id, l.started_at
    FROM this JOIN devices d ON d.model = this.model
        CROSS JOIN LATERAL (
            SELECT id, started_at FROM runs
            WHERE device_id = d.id AND repository_id = this.repository_id AND {_HISTORY}
            ORDER BY started_at DESC LIMIT 1
        ) l
    ORDER BY l.started_at DESC, l.id DESC LIMIT 1
), previous AS (
    SELECT p.id
    FROM this JOIN devices d ON d.model = this.model
        CROSS JOIN latest
        CROSS JOIN LATERAL (
            SELECT id, started_at FROM runs
            WHERE device_id = d.id AND repository_id = this.repository_id AND {_HISTORY}
                AND started_at < latest.started_at
            ORDER BY started_at DESC LIMIT 1
        ) p
    ORDER BY p.started_at DESC, p.id DESC LIMIT 1
)
SELECT lp.run_pk, lp.series_id, lp.median_ns / lp.previous_median_ns
FROM latest
    JOIN previous ON true
    JOIN latest_points lp ON lp.run_pk = latest.id AND lp.previous_run_pk = previous.id
WHERE lp.status = 'ok' AND lp.median_ns > 0
    AND lp.previous_status = 'ok' AND lp.previous_median_ns > 0
ORDER BY lp.median_ns / lp.previous_median_ns DESC, lp.series_id
LIMIT {MOVERS}
$fn$;
GRANT EXECUTE ON FUNCTION night_movers_refresh(bigint) TO {WRITER};"""

# Every query of this store is short (an ingest, a panel): JIT compiling one costs more
# than running it, and a never-analysed small table's default estimates trip it.
NO_JIT = """
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET jit = off', current_database());
EXCEPTION WHEN insufficient_privilege THEN
    RAISE NOTICE 'jit is still on for this database: its owner can turn it off (jit = off)';
END $$;"""

# Ties between two GPUs' runs of one model broken the same way everywhere (the larger id).
_TIES = (
    ("ORDER BY repo.id, d.model, r.started_at DESC",
     "ORDER BY repo.id, d.model, r.started_at DESC, r.id DESC"),
    ("ORDER BY l.repository_id, l.device_model, r.started_at DESC\n)",
     "ORDER BY l.repository_id, l.device_model, r.started_at DESC, r.id DESC\n)"),
)  # fmt: skip

BACKFILL = "SELECT night_movers_refresh(run_pk) FROM report_latest_nightly_runs;"

# 0016's comparison, the series it pairs limited to the suspected ones and the movers.
_TOP_EDITS = (
    ("""    ORDER BY ns.run_id, ns.series_id, ns.id DESC
)""",
     """    ORDER BY ns.run_id, ns.series_id, ns.id DESC
), picked AS (
    SELECT run_id AS run_pk, series_id FROM suspects
    UNION
    SELECT run_pk, series_id FROM night_movers WHERE run_pk IN (SELECT run_pk FROM latest)
)"""),
    ("    JOIN latest_points lp ON lp.run_pk = l.run_pk",
     """    JOIN picked k ON k.run_pk = l.run_pk
    JOIN latest_points lp ON lp.series_id = k.series_id AND lp.run_pk = l.run_pk"""),
)  # fmt: skip

NIGHTLY_KERNELS = """
SELECT l.repository, l.device_model, k.name AS kernel, sum(n.cases) AS series,
    max(l.started_at) AS latest_at,
    sum(n.pct_sol_sum) / NULLIF(sum(n.sol_cases), 0) AS mean_pct_sol,
    exp(sum(n.ln_speedup_sum) / NULLIF(sum(n.speedup_cases), 0)) AS speedup_geomean,
    count(DISTINCT l.run_pk) FILTER (WHERE l.status = 'partial') AS partial_runs
FROM report_latest_nightly_runs l
    JOIN night_kernel_stats n ON n.run_id = l.run_pk
    JOIN kernels k ON k.id = n.kernel_id
GROUP BY l.repository, l.device_model, k.name"""


def _edited(body: str, edits: tuple[tuple[str, str], ...], what: str) -> str:
    for old, new in edits:
        if body.count(old) != 1:
            raise ValueError(f"{what} changed: {old[:60]!r}")
        body = body.replace(old, new)
    return body


def latest_runs() -> str:
    """The body of ``report_latest_nightly_runs``: 0009's, ties broken."""
    honest = importlib.import_module(f"{_VERSIONS}.0009_honest_dashboards")
    return _edited(honest.VIEWS["report_latest_nightly_runs"], _TIES[:1], "0009's latest runs")


def comparison() -> str:
    """The body of ``report_night_comparison``: 0016's, ties broken."""
    latest = importlib.import_module(f"{_VERSIONS}.0016_latest_points")
    fleet_scale = importlib.import_module(f"{_VERSIONS}.0014_fleet_scale")
    return _edited(latest._comparison(fleet_scale.NIGHT_COMPARISON), _TIES[1:],
                   "0016's night comparison")  # fmt: skip


def comparison_top() -> str:
    """The body of ``report_night_comparison_top``."""
    return _edited(comparison(), _TOP_EDITS, "0016's night comparison")


def upgrade() -> None:
    op.execute(NO_JIT)
    op.execute(INDEX)
    op.execute(f"CREATE OR REPLACE VIEW report_latest_nightly_runs AS {latest_runs()};")
    op.execute(f"CREATE OR REPLACE VIEW report_night_comparison AS {comparison()};")
    op.execute(TABLE)
    op.execute(REFRESH)
    op.execute(BACKFILL)
    op.execute("ANALYZE runs, night_movers")
    op.execute(f"CREATE VIEW report_night_comparison_top AS {comparison_top()};")
    op.execute(f"GRANT SELECT ON report_night_comparison_top TO {READER};")
    op.execute(f"CREATE OR REPLACE VIEW report_nightly_kernels AS {NIGHTLY_KERNELS};")


def downgrade() -> None:
    honest = importlib.import_module(f"{_VERSIONS}.0009_honest_dashboards")
    latest = importlib.import_module(f"{_VERSIONS}.0016_latest_points")
    fleet_scale = importlib.import_module(f"{_VERSIONS}.0014_fleet_scale")
    op.execute(
        f"CREATE OR REPLACE VIEW report_nightly_kernels AS "
        f"{honest.VIEWS['report_nightly_kernels']};"
    )
    op.execute("DROP VIEW report_night_comparison_top;")
    op.execute("DROP FUNCTION night_movers_refresh(bigint);")
    op.execute("DROP TABLE night_movers;")
    op.execute(
        "CREATE OR REPLACE VIEW report_night_comparison AS "
        f"{latest._comparison(fleet_scale.NIGHT_COMPARISON)};"
    )
    op.execute(
        "CREATE OR REPLACE VIEW report_latest_nightly_runs AS "
        f"{honest.VIEWS['report_latest_nightly_runs']};"
    )
    op.execute("DROP INDEX runs_history_idx;")
    op.execute(NO_JIT.replace("SET jit = off", "RESET jit"))
