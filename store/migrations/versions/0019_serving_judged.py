"""Serving results judged, shown and explained (issues 43 and 44).

- ``serving_changes``: a change point of one judged metric of a deployment, at the first run
  of the new level (``run_pk``) after the last of the old (``previous_run_pk``); the kernel
  commits each served are those runs'. Unique per (deployment, metric, run): judging again
  finds the same change, and a provisional one becomes settled in place. Where a run either
  side has a trace, what the kernels explain of it (``explained_pct``, ``explanation``).
- ``regressions`` holds serving regressions too (``kind`` serving): ``deployment_id`` set,
  ``repository_id`` the kernel repository whose commit the bad run served when kernelwatch
  knows that commit (null otherwise), so every triage command, view and alert that lists
  regressions lists them; ``report_regressions`` joins the repository as optional.
- ``serving_traces`` and ``serving_trace_kernels``: a profiler trace of a run's serving step
  (torch.profiler or Nsight Systems), unique per run and file content, with each GPU kernel's
  launches, GPU time and share of the step's kernel time.

The writer inherits SELECT, INSERT and UPDATE on new tables (migration 0002's default
privileges); the reader reads none of them, only the views (``store/views/``) Grafana's
serving dashboard and alert rule read:

- ``report_serving_deployments``: each deployment with its ok and failed runs;
- ``report_serving_metrics``: every ok run's summary metrics, long form;
- ``report_serving_deploys``: each ok run that served another kernel commit than the ok run
  before it, with both commits resolved to stored commits where kernelwatch measured them;
- ``report_serving_kernel_regressions``: the kernel regressions a deploy shipped (their
  culprit, or before bisection found one their range's bad commit, after the commit served
  before and at most the one served now, in one repository);
- ``report_serving_changes`` and ``report_serving_regressions``: the judged changes, and per
  serving regression its metrics, whether all are still provisional, and its triage state.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

#: Regression kinds before this revision (0005's), and with serving.
_KINDS = "('timing', 'correctness', 'static')"
SERVING_KINDS = "('timing', 'correctness', 'static', 'serving')"

TABLES = f"""
ALTER TABLE regressions
    ALTER COLUMN repository_id DROP NOT NULL,
    ADD COLUMN deployment_id int REFERENCES deployments(id),
    ADD CONSTRAINT regressions_subject_check
        CHECK (repository_id IS NOT NULL OR deployment_id IS NOT NULL),
    DROP CONSTRAINT regressions_kind_check,
    ADD CONSTRAINT regressions_kind_check CHECK (kind IN {SERVING_KINDS});
CREATE TABLE serving_changes (
    id               bigserial PRIMARY KEY,
    deployment_id    int NOT NULL REFERENCES deployments(id),
    metric           text NOT NULL,
    run_pk           bigint NOT NULL REFERENCES serving_runs(id) ON DELETE CASCADE,
    previous_run_pk  bigint NOT NULL REFERENCES serving_runs(id) ON DELETE CASCADE,
    direction        text NOT NULL CHECK (direction IN ('regression', 'improvement')),
    rel_change       double precision NOT NULL,
    p_value          double precision NOT NULL,
    provisional      boolean NOT NULL,
    regression_id    bigint REFERENCES regressions(id) ON DELETE SET NULL,
    -- what the kernels explain of it, from a traced run either side (null: no trace yet)
    explained_pct    double precision,
    explanation      text,
    detected_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (deployment_id, metric, run_pk)
);
CREATE INDEX serving_changes_regression_idx ON serving_changes (regression_id);
CREATE TABLE serving_traces (
    id           bigserial PRIMARY KEY,
    run_pk       bigint NOT NULL REFERENCES serving_runs(id) ON DELETE CASCADE,
    digest       text NOT NULL,
    source       text NOT NULL CHECK (source IN ('torch-profiler', 'nsys-sqlite')),
    device       text NOT NULL,
    gpu_ns       bigint NOT NULL CHECK (gpu_ns > 0),
    ingested_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (run_pk, digest)
);
CREATE TABLE serving_trace_kernels (
    trace_id    bigint NOT NULL REFERENCES serving_traces(id) ON DELETE CASCADE,
    name        text NOT NULL,
    short_name  text NOT NULL,
    launches    int NOT NULL CHECK (launches > 0),
    gpu_ns      bigint NOT NULL CHECK (gpu_ns >= 0),
    share       double precision NOT NULL CHECK (share >= 0 AND share <= 1),
    PRIMARY KEY (trace_id, name)
);"""

DOWN = f"""
DROP TABLE serving_trace_kernels, serving_traces, serving_changes;
DELETE FROM regressions WHERE deployment_id IS NOT NULL;
ALTER TABLE regressions
    DROP CONSTRAINT regressions_subject_check,
    DROP COLUMN deployment_id,
    ALTER COLUMN repository_id SET NOT NULL,
    DROP CONSTRAINT regressions_kind_check,
    ADD CONSTRAINT regressions_kind_check CHECK (kind IN {_KINDS});"""


def upgrade() -> None:
    op.execute(TABLES)


def downgrade() -> None:
    op.execute(DOWN)
