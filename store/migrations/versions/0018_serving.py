"""Serving results beside the kernels (issue 43): deployments (the serving series' key), one
row per serving benchmark run with its summary metrics, and the runs' per-request latencies.

- ``deployments``: what was served, on what, under which load; a new kernel commit deployed
  is a new run of the same deployment (``serving_runs.kernel_commit``), not a new row here.
- ``serving_runs``: one benchmark run, unique by ``run_key`` (a digest of the file's run), so
  ingesting a file again stores nothing; ``status`` failed (nothing completed, or every
  metric zero) keeps the run out of every baseline.
- ``serving_metrics``: the run's summary metrics by vLLM's key names (``p99_tpot_ms``).
- ``serving_samples``: per latency (ttft, tpot, itl, e2el), the completed requests' values
  in ms as one float4 array, COPY'd like kernel samples.

The writer inherits SELECT, INSERT and UPDATE on new tables (migration 0002's default
privileges); the reader gets nothing here: what Grafana reads of these comes through views.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE deployments (
    id          serial PRIMARY KEY,
    name        text NOT NULL,
    model       text NOT NULL,
    engine      text NOT NULL,
    gpu         text NOT NULL,
    gpu_count   int NOT NULL CHECK (gpu_count >= 1),
    tp          int NOT NULL CHECK (tp >= 1),
    ep          int NOT NULL CHECK (ep >= 1),
    load        text NOT NULL,
    dataset     text NOT NULL,
    UNIQUE (name, model, engine, gpu, gpu_count, tp, ep, load, dataset)
);
CREATE TABLE serving_runs (
    id              bigserial PRIMARY KEY,
    run_key         text NOT NULL UNIQUE,
    deployment_id   int NOT NULL REFERENCES deployments(id),
    source          text NOT NULL,
    kernel_commit   text NOT NULL,
    engine_version  text NOT NULL,
    started_at      timestamptz NOT NULL,
    status          text NOT NULL CHECK (status IN ('ok', 'failed')),
    completed       int NOT NULL CHECK (completed >= 0),
    failed          int NOT NULL CHECK (failed >= 0),
    duration_s      double precision NOT NULL,
    input_tokens    bigint NOT NULL,
    output_tokens   bigint NOT NULL,
    simulated       boolean NOT NULL,
    extra           jsonb NOT NULL,
    ingested_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX serving_runs_history_idx ON serving_runs (deployment_id, started_at, id)
    WHERE status = 'ok';
CREATE TABLE serving_metrics (
    run_pk  bigint NOT NULL REFERENCES serving_runs(id) ON DELETE CASCADE,
    metric  text NOT NULL,
    value   double precision NOT NULL CHECK (value >= 0),
    PRIMARY KEY (run_pk, metric)
);
CREATE TABLE serving_samples (
    run_pk     bigint NOT NULL REFERENCES serving_runs(id) ON DELETE CASCADE,
    latency    text NOT NULL,
    values_ms  real[] NOT NULL,
    PRIMARY KEY (run_pk, latency)
);"""


def upgrade() -> None:
    op.execute(TABLES)


def downgrade() -> None:
    op.execute("DROP TABLE serving_samples, serving_metrics, serving_runs, deployments;")
