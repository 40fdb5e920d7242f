"""The quarter per family and GPU, kept at ingest (issue 30).

- ``night_kernel_stats``: per history run, kernel and method, the cases measured ok and the
  sums of their log speedups over the stock library and of their %SOL, written when a run
  is ingested (``kernelwatch.store.night_stats``) and here for the runs stored before.
- ``report_night_kernels``: per night, kernel, GPU model and method, the geometric-mean
  speedup and the mean %SOL; ``report_night_families``: the same per family (a kernel
  without a declared family is a family of its own), from the same sums, so a family's
  geometric mean is over its cases, not over its kernels' means.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
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

VIEWS = {
    "report_night_kernels": """
SELECT n.night, repo.name AS repository, k.name AS kernel,
    CASE WHEN k.family <> '' THEN k.family ELSE k.name END AS family, d.model AS device_model,
    n.method, n.cases, n.speedup_cases, n.ln_speedup_sum, n.sol_cases, n.pct_sol_sum,
    exp(n.ln_speedup_sum / NULLIF(n.speedup_cases, 0)) AS speedup_geomean,
    n.pct_sol_sum / NULLIF(n.sol_cases, 0) AS mean_pct_sol
FROM night_kernel_stats n
    JOIN kernels k ON k.id = n.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    JOIN runs r ON r.id = n.run_id
    JOIN devices d ON d.id = r.device_id""",
    "report_night_families": """
SELECT night, repository, family, device_model, method, sum(cases) AS cases,
    count(*) AS kernels,
    exp(sum(ln_speedup_sum) / NULLIF(sum(speedup_cases), 0)) AS speedup_geomean,
    sum(pct_sol_sum) / NULLIF(sum(sol_cases), 0) AS mean_pct_sol
FROM report_night_kernels
GROUP BY night, repository, family, device_model, method""",
}


def upgrade() -> None:
    op.execute(TABLE)
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body};")
    op.execute(f"GRANT SELECT ON {', '.join(VIEWS)} TO {READER};")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name};")
    op.execute("DROP TABLE night_kernel_stats;")
