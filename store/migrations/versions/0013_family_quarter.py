"""The quarter per family and GPU, kept at ingest (issue 30).

- ``night_kernel_stats``: per history run, kernel and method, the cases measured ok and the
  sums of their log speedups over the stock library and of their %SOL, written when a run
  is ingested (``kernelwatch.store.night_stats``) and here for the runs stored before.
- ``report_night_kernels``: per night, kernel, GPU model and method, the geometric-mean
  speedup and the mean %SOL; ``report_night_families``: the same per family (a kernel
  without a declared family is a family of its own), from the same sums, so a family's
  geometric mean is over its cases, not over its kernels' means.

Its views are defined in ``store/views/`` now; this revision keeps its tables.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

METHOD = "s.timer || '/' || s.l2 || '/h' || s.harness_version"

TABLE = f"""
CREATE TABLE night_kernel_stats (
    run_id          bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kernel_id       int NOT NULL REFERENCES kernels(id),
    method          text NOT NULL,
    night           timestamptz NOT NULL,
    cases           int NOT NULL,
    speedup_cases   int NOT NULL,
    ln_speedup_sum  double precision NOT NULL,
    sol_cases       int NOT NULL,
    pct_sol_sum     double precision NOT NULL,
    PRIMARY KEY (run_id, kernel_id, method)
);
CREATE INDEX night_kernel_stats_night_idx ON night_kernel_stats (night);
INSERT INTO night_kernel_stats
SELECT m.run_id, s.kernel_id, {METHOD}, min(m.measured_at), count(*),
    count(*) FILTER (WHERE m.speedup > 0),
    coalesce(sum(ln(m.speedup)) FILTER (WHERE m.speedup > 0), 0),
    count(m.pct_sol), coalesce(sum(m.pct_sol), 0)
FROM measurements m JOIN series s ON s.id = m.series_id
WHERE m.history AND m.status = 'ok'
GROUP BY m.run_id, s.kernel_id, {METHOD};"""


def upgrade() -> None:
    op.execute(TABLE)


def downgrade() -> None:
    op.execute("DROP TABLE night_kernel_stats;")
