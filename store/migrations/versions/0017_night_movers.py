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
- The views (``store/views/`` now): ``report_night_comparison_top``,
  ``report_night_comparison`` limited to the rows the
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

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"
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

# One refresh per repository and GPU model that has a history run: the function finds that
# pair's latest run and the one before it itself.
BACKFILL = """
SELECT night_movers_refresh(max(r.id)) FROM runs r JOIN devices d ON d.id = r.device_id
WHERE r.trigger IN ('nightly', 'manual') AND r.status IN ('ok', 'partial')
GROUP BY r.repository_id, d.model;"""


def upgrade() -> None:
    op.execute(NO_JIT)
    op.execute(INDEX)
    op.execute(TABLE)
    op.execute(REFRESH)
    op.execute(BACKFILL)
    op.execute("ANALYZE runs, night_movers")


def downgrade() -> None:
    op.execute("DROP FUNCTION night_movers_refresh(bigint);")
    op.execute("DROP TABLE night_movers;")
    op.execute("DROP INDEX runs_history_idx;")
    op.execute(NO_JIT.replace("SET jit = off", "RESET jit"))
