"""Reporting views for dashboards and alerts, and the two roles: ``kernelwatch_writer``
(ingest, detection, triage) and ``kernelwatch_reader`` (Grafana: SELECT on the views only,
the reporting views and 0001's raw_samples).

Roles are cluster-wide while this migration runs per database, so creating one that exists
is not an error, and downgrade keeps a role another database still grants to.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"
READER = "kernelwatch_reader"
OPEN_STATES = "('untriaged', 'acknowledged', 'investigating')"

_SERIES_COLUMNS = """
    s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite, k.name AS kernel,
    s.workload, s.params, s.dtype, s.device_model,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method"""
_SERIES_JOINS = """
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id"""
_VALUE_COLUMNS = """
    m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.p10_ns, m.p90_ns, m.min_ns, m.n,
    m.rel_ci_halfwidth, m.throttled_count, m.tflops, m.gbps, m.pct_sol, m.speedup,
    cfg.label AS config"""
# History lines are drawn from the tracked branch (measurements.history: nightly and manual
# runs); PR and bisect runs are comparisons, shown against the latest value. The latest value
# of a series is the last entry of measurements_history_idx: one index descent per series.
_LATEST = """(
        SELECT * FROM measurements
        WHERE series_id = {series} AND history
        ORDER BY measured_at DESC, id DESC LIMIT 1
    )"""

VIEWS = {
    "report_latest": f"""
SELECT {_SERIES_COLUMNS},
    m.measured_at, run.run_id, run.trigger, c.sha AS commit_sha, {_VALUE_COLUMNS}
FROM series s {_SERIES_JOINS}
    CROSS JOIN LATERAL {_LATEST.format(series="s.id")} m
    JOIN runs run ON run.id = m.run_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id""",
    # The run's descriptors come from a fenced (OFFSET 0) lateral subquery looked up by
    # primary key per point: the planner then orders 6 relations instead of 9, which halves
    # the planning time, the larger part of this query's latency.
    "report_series_history": f"""
SELECT {_SERIES_COLUMNS},
    m.measured_at, m.id AS measurement_id, r.run_id, r.trigger, r.commit_sha,
    r.device_uuid, r.host, {_VALUE_COLUMNS},
    cp.id AS change_point_id, cp.direction AS change_direction,
    cp.rel_change AS change_rel, cp.regression_id
FROM series s {_SERIES_JOINS}
    JOIN measurements m ON m.series_id = s.id AND m.history
    CROSS JOIN LATERAL (
        SELECT run.run_id, run.trigger, c.sha AS commit_sha, d.uuid AS device_uuid, d.host
        FROM runs run JOIN devices d ON d.id = run.device_id
            LEFT JOIN commits c ON c.id = run.commit_id
        WHERE run.id = m.run_id OFFSET 0
    ) r
    LEFT JOIN configs cfg ON cfg.id = m.config_id
    LEFT JOIN LATERAL (
        SELECT id, direction, rel_change, regression_id FROM change_points
        WHERE series_id = m.series_id AND measurement_id = m.id
        ORDER BY detected_at DESC LIMIT 1
    ) cp ON true""",
    "report_regressions": f"""
SELECT g.id AS regression_id, repo.name AS repository, g.title, g.state,
    g.state IN {OPEN_STATES} AS open, g.cause, g.magnitude,
    good.sha AS good_sha, bad.sha AS bad_sha, culprit.sha AS culprit_sha,
    g.assignee, g.bug_url, g.notes, g.created_at, g.updated_at, g.resolved_at,
    (SELECT count(*) FROM change_points cp WHERE cp.regression_id = g.id) AS change_points
FROM regressions g
    JOIN repositories repo ON repo.id = g.repository_id
    LEFT JOIN commits good ON good.id = g.good_commit_id
    LEFT JOIN commits bad ON bad.id = g.bad_commit_id
    LEFT JOIN commits culprit ON culprit.id = g.culprit_commit_id""",
    "report_open_regressions": "SELECT * FROM report_regressions WHERE open",
    "report_device_noise": """
SELECT d.id AS device_id, d.model, d.uuid, d.host,
    date_trunc('day', run.started_at) AS day,
    count(*) AS runs, sum(run.measurements) AS measurements,
    sum(run.measurement_errors) AS measurement_errors,
    sum(run.samples) AS samples, sum(run.throttled_samples) AS throttled_samples,
    avg(run.mean_rel_ci) AS mean_rel_ci
FROM runs run JOIN devices d ON d.id = run.device_id
GROUP BY d.id, d.model, d.uuid, d.host, date_trunc('day', run.started_at)""",
    "report_run_comparison": f"""
SELECT run.run_id, run.trigger, run.base_sha, c.sha AS commit_sha, {_SERIES_COLUMNS},
    {_VALUE_COLUMNS},
    ref.median_ns AS reference_median_ns, ref.ci_low_ns AS reference_ci_low_ns,
    ref.ci_high_ns AS reference_ci_high_ns, ref.measured_at AS reference_measured_at,
    m.median_ns / NULLIF(ref.median_ns, 0) AS ratio
FROM measurements m
    JOIN runs run ON run.id = m.run_id
    JOIN series s ON s.id = m.series_id {_SERIES_JOINS}
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id
    LEFT JOIN LATERAL {_LATEST.format(series="m.series_id")} ref ON true""",
    "report_annotations": """
SELECT a.id AS annotation_id, a.at, a.kind, a.text, a.author, repo.name AS repository,
    s.key AS series_key, a.series_id, a.device_model, c.sha AS commit_sha
FROM annotations a
    LEFT JOIN repositories repo ON repo.id = a.repository_id
    LEFT JOIN series s ON s.id = a.series_id
    LEFT JOIN commits c ON c.id = a.commit_id""",
}


def _create_role(name: str) -> str:
    return f"""
DO $$ BEGIN
    CREATE ROLE {name} LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;"""


def _drop_role(name: str) -> str:
    return f"""
DO $$ BEGIN
    DROP ROLE {name};
EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE NOTICE 'role {name} kept: another database still grants to it';
END $$;"""


def upgrade() -> None:
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body};")
    views = ", ".join(VIEWS)
    op.execute(
        _create_role(WRITER)
        + _create_role(READER)
        + f"""
GRANT USAGE ON SCHEMA public TO {WRITER}, {READER};
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {WRITER};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE ON TABLES TO {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {WRITER};
GRANT SELECT ON {views}, raw_samples TO {READER};"""
    )


def downgrade() -> None:
    op.execute(
        f"""
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM {WRITER};
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {WRITER}, {READER};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {WRITER};
REVOKE ALL ON SCHEMA public FROM {WRITER}, {READER};"""
        + _drop_role(WRITER)
        + _drop_role(READER)
    )
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name};")
