"""Serving results judged, shown and explained (issues 43 and 44).

- ``serving_changes``: a change point of one judged metric of a deployment, at the first run
  of the new level (``run_pk``) after the last of the old (``previous_run_pk``); the kernel
  commits each served are those runs'. Unique per (deployment, metric, run): judging again
  finds the same change, and a provisional one becomes settled in place. Where a run either
  side has a trace, what the kernels explain of it (``explained_pct``, ``explanation``).
- ``regressions`` holds serving regressions too (``kind`` serving): ``deployment_id`` set,
  ``repository_id`` the kernel repository whose commit the bad run served when kernelwatch
  knows that commit (null otherwise), so every triage command, view and alert that lists
  regressions lists them. ``report_regressions`` joins the repository as optional.
- ``serving_traces`` and ``serving_trace_kernels``: a profiler trace of a run's serving step
  (torch.profiler or Nsight Systems), unique per run and file content, with each GPU kernel's
  launches, GPU time and share of the step's kernel time.

The writer inherits SELECT, INSERT and UPDATE on new tables (migration 0002's default
privileges); the reader reads none of them, only the views Grafana's serving dashboard and
alert rule read:

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

import importlib

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_VERSIONS = "kernelwatch.store.migrations.versions"
_EARLIER = importlib.import_module(f"{_VERSIONS}.0005_night_suspects")
_KINDS = _EARLIER.KINDS
OPEN_STATES = _EARLIER.OPEN_STATES
SERVING_KINDS = _KINDS.replace(")", ", 'serving')")
#: 0005's view of regressions, its repository made optional (a serving regression's
#: deployment may serve a commit kernelwatch has never measured); the same columns.
REGRESSIONS = _EARLIER.REGRESSIONS.replace(
    "    JOIN repositories repo", "    LEFT JOIN repositories repo"
)

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


# A kernel commit as a serving job names it (often abbreviated) resolved to the one stored
# commit it is a prefix of; an ambiguous or unknown one stays unresolved.
_RESOLVED = """(SELECT c.id FROM commits c WHERE length({sha}) >= 7 AND c.sha LIKE {sha} || '%'
    AND (SELECT count(*) FROM commits o WHERE o.sha LIKE {sha} || '%') = 1)"""

VIEWS = {
    "report_serving_deployments": """
SELECT d.id AS deployment_id, d.name AS deployment, d.model, d.engine, d.gpu, d.gpu_count,
    d.tp, d.ep, d.load, d.dataset,
    count(r.id) FILTER (WHERE r.status = 'ok') AS ok_runs,
    count(r.id) FILTER (WHERE r.status = 'failed') AS failed_runs,
    min(r.started_at) AS first_run_at, max(r.started_at) AS last_run_at,
    coalesce(bool_or(r.simulated), false) AS simulated
FROM deployments d LEFT JOIN serving_runs r ON r.deployment_id = d.id
GROUP BY d.id""",
    "report_serving_metrics": """
SELECT d.name AS deployment, r.id AS run_pk, r.started_at, r.kernel_commit, r.engine_version,
    r.simulated, d.gpu, d.gpu_count, m.metric, m.value
FROM serving_runs r
    JOIN deployments d ON d.id = r.deployment_id
    JOIN serving_metrics m ON m.run_pk = r.id
WHERE r.status = 'ok'""",
    "report_serving_deploys": f"""
SELECT x.deployment, x.started_at, x.kernel_commit, x.previous_kernel_commit,
    {_RESOLVED.format(sha="x.kernel_commit")} AS commit_id,
    {_RESOLVED.format(sha="x.previous_kernel_commit")} AS previous_commit_id
FROM (
    SELECT d.name AS deployment, r.started_at, r.kernel_commit,
        lag(r.kernel_commit) OVER (PARTITION BY r.deployment_id ORDER BY r.started_at, r.id)
            AS previous_kernel_commit
    FROM serving_runs r JOIN deployments d ON d.id = r.deployment_id
    WHERE r.status = 'ok'
) x
WHERE x.previous_kernel_commit IS DISTINCT FROM x.kernel_commit""",
    "report_serving_kernel_regressions": f"""
SELECT dp.deployment, dp.started_at, dp.kernel_commit, g.id AS regression_id, g.kind,
    g.title, g.state, g.state IN {OPEN_STATES} AS open, g.magnitude, bad.sha AS commit_sha,
    repo.name AS repository
FROM report_serving_deploys dp
    JOIN commits now_c ON now_c.id = dp.commit_id
    JOIN commits was_c ON was_c.id = dp.previous_commit_id
        AND was_c.repository_id = now_c.repository_id
    JOIN regressions g ON g.repository_id = now_c.repository_id AND g.kind <> 'serving'
    JOIN commits bad ON bad.id = coalesce(g.culprit_commit_id, g.bad_commit_id)
    JOIN repositories repo ON repo.id = now_c.repository_id
WHERE bad.author_time > was_c.author_time AND bad.author_time <= now_c.author_time""",
    "report_serving_changes": f"""
SELECT d.name AS deployment, sc.metric, sc.direction, sc.rel_change, sc.provisional,
    r.started_at AS at, r.kernel_commit, p.started_at AS previous_at,
    p.kernel_commit AS previous_kernel_commit, sc.regression_id, g.state,
    g.state IN {OPEN_STATES} AS open, sc.explained_pct, sc.explanation
FROM serving_changes sc
    JOIN deployments d ON d.id = sc.deployment_id
    JOIN serving_runs r ON r.id = sc.run_pk
    JOIN serving_runs p ON p.id = sc.previous_run_pk
    LEFT JOIN regressions g ON g.id = sc.regression_id""",
    "report_serving_regressions": f"""
SELECT g.id AS regression_id, d.name AS deployment, g.title, g.state,
    g.state IN {OPEN_STATES} AS open, g.magnitude, g.created_at,
    bool_and(sc.provisional) AS provisional,
    string_agg(sc.metric, ', ' ORDER BY abs(sc.rel_change) DESC) AS metrics,
    min(r.started_at) AS at, min(r.kernel_commit) AS kernel_commit,
    min(p.kernel_commit) AS previous_kernel_commit,
    (array_agg(sc.explanation ORDER BY abs(sc.rel_change) DESC)
        FILTER (WHERE sc.explanation IS NOT NULL))[1] AS explanation
FROM regressions g
    JOIN deployments d ON d.id = g.deployment_id
    JOIN serving_changes sc ON sc.regression_id = g.id
    JOIN serving_runs r ON r.id = sc.run_pk
    JOIN serving_runs p ON p.id = sc.previous_run_pk
GROUP BY g.id, d.name""",
}


def upgrade() -> None:
    op.execute(TABLES)
    op.execute(f"CREATE OR REPLACE VIEW report_regressions AS {REGRESSIONS};")
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql};")
    op.execute(f"GRANT SELECT ON {', '.join(VIEWS)} TO {_EARLIER.READER};")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name};")
    op.execute(f"CREATE OR REPLACE VIEW report_regressions AS {_EARLIER.REGRESSIONS};")
    op.execute(DOWN)
