"""The dashboards fast on a year of fleet history (issue 30).

- ``series_points``: the history points of each series counted up to 100, at ingest
  (``kernelwatch.store.night_stats``) and here for the points stored before;
  ``report_series_lengths`` reads it instead of counting 2.3 million measurements per call
  (the "series too short to judge" count took 1.4 s at fleet scale), so its ``points`` stop
  at 100.
- ``measurements_comm_idx``: the few measurements with a bus bandwidth (collectives), so the
  communication dashboard finds them without scanning every measurement.
- ``report_bisect_steps.probe_run_at`` is read from ``runs`` alone: the first history run of
  the probed commit on the step's GPU model; for a commit no nightly measured (one of
  several merged on one night), the first history run after both its author time and the
  step's good commit's first run, which is the nightly it first ran in. It used to scan the
  measurements of those runs, and to fall back on the author time, days before the night.
- ``report_night_comparison`` again, the same rows: the commits, the suspects and their
  regressions joined once per night instead of once per series (130 ms to 60 ms at fleet
  scale).
- ``report_regression_repro``: per regression the command that measures it again, head
  against base on one GPU with its kernel, workload and dtype pinned:
  ``kernelwatch pr-check --base <culprit's parent> --head <culprit>`` (before a bisection
  named one, the regression's good and bad commits), the kernel, workload and dtype of its
  series that moved most, or of its night's finding when it has no series.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
HISTORY = "r.trigger IN ('nightly', 'manual') AND r.status IN ('ok', 'partial')"
SAME_MODEL = """(d.model IS NULL OR EXISTS (
    SELECT 1 FROM devices rd WHERE rd.id = r.device_id AND rd.model = d.model))"""

SERIES_LENGTHS = """
SELECT rs.series_key, rs.repository, rs.kernel, rs.device_model,
    coalesce(p.points, 0)::bigint AS points
FROM report_series rs LEFT JOIN series_points p ON p.series_id = rs.series_id"""

BISECT_STEPS = f"""
SELECT b.id AS step_id, b.bisect_id, b.step, b.at, probe.author_time AS probe_time,
    b.regression_id, repo.name AS repository, s.key AS series_key, d.model AS device_model,
    d.host, d.uuid AS device_uuid, good.sha AS good_sha, probe.sha AS probe_sha, b.verdict,
    b.ratio, b.ci_low, b.ci_high, b.samples, b.gpu_seconds, b.note,
    format('bisect step %s: %s at %s against %s%s', b.step, b.verdict, left(probe.sha, 12),
        left(good.sha, 12),
        ', ratio ' || round(b.ratio::numeric, 3) || ' [' || round(b.ci_low::numeric, 3)
            || ', ' || round(b.ci_high::numeric, 3) || ']') AS summary,
    coalesce(
        (SELECT min(r.started_at) FROM runs r
         WHERE r.commit_id = b.probe_commit_id AND r.repository_id = b.repository_id
            AND {HISTORY} AND {SAME_MODEL}),
        (SELECT min(r.started_at) FROM runs r
         WHERE r.repository_id = b.repository_id AND {HISTORY} AND {SAME_MODEL}
            AND r.started_at >= probe.author_time
            AND r.started_at > coalesce((SELECT min(g.started_at) FROM runs g
                WHERE g.commit_id = b.good_commit_id AND g.trigger IN ('nightly', 'manual')),
                '-infinity'))) AS probe_run_at
FROM bisect_steps b
    JOIN repositories repo ON repo.id = b.repository_id
    JOIN commits good ON good.id = b.good_commit_id
    JOIN commits probe ON probe.id = b.probe_commit_id
    LEFT JOIN devices d ON d.id = b.device_id
    LEFT JOIN series s ON s.id = b.series_id"""


def _shell(text: str) -> str:
    """SQL quoting the text expression ``text`` for a shell: plain words as they are,
    anything else in single quotes (a quote inside as '\'')."""
    plain = r"'^[A-Za-z0-9_.,:/@=+-]+$'"
    quoted = r"'''' || replace(" + text + r", '''', '''\''''') || ''''"
    return f"CASE WHEN {text} ~ {plain} THEN {text} ELSE {quoted} END"


_OPTION = "coalesce(' --{0} ' || {1}, '')"

REPRO = f"""
SELECT g.id AS regression_id, repo.name AS repository,
    coalesce(culprit.sha, bad.sha) AS head_sha,
    coalesce(culprit.parents[1], good.sha) AS base_sha,
    coalesce(w.kernel, ns.kernel) AS kernel, w.workload, coalesce(w.dtype, ns.dtype) AS dtype,
    'kernelwatch pr-check --repository ' || {_shell("repo.name")}
        || ' --base ' || coalesce(culprit.parents[1], good.sha)
        || ' --head ' || coalesce(culprit.sha, bad.sha)
        || {_OPTION.format("kernel", _shell("coalesce(w.kernel, ns.kernel)"))}
        || {_OPTION.format("workload", _shell("w.workload"))}
        || {_OPTION.format("dtype", _shell("coalesce(w.dtype, ns.dtype)"))} AS repro
FROM regressions g
    JOIN repositories repo ON repo.id = g.repository_id
    LEFT JOIN commits culprit ON culprit.id = g.culprit_commit_id
    LEFT JOIN commits good ON good.id = g.good_commit_id
    LEFT JOIN commits bad ON bad.id = g.bad_commit_id
    LEFT JOIN LATERAL (
        SELECT k.name AS kernel, s.workload, s.dtype
        FROM change_points cp JOIN series s ON s.id = cp.series_id
            JOIN kernels k ON k.id = s.kernel_id
        WHERE cp.regression_id = g.id ORDER BY abs(cp.rel_change) DESC, s.key LIMIT 1
    ) w ON true
    LEFT JOIN LATERAL (
        SELECT k.name AS kernel, n.dtype FROM night_suspects n
            JOIN kernels k ON k.id = n.kernel_id
        WHERE n.regression_id = g.id ORDER BY n.id LIMIT 1
    ) ns ON w.kernel IS NULL
WHERE coalesce(culprit.sha, bad.sha) IS NOT NULL
    AND coalesce(culprit.parents[1], good.sha) IS NOT NULL"""


NIGHT_COMPARISON = """
WITH latest AS (
    SELECT l.repository_id, l.repository, l.device_model, l.run_pk, l.run_id, l.started_at,
        l.status, r.device_id, c.sha
    FROM report_latest_nightly_runs l
        JOIN runs r ON r.id = l.run_pk
        LEFT JOIN commits c ON c.id = l.commit_id
), previous AS (
    SELECT DISTINCT ON (l.repository_id, l.device_model) l.run_pk AS latest_pk,
        r.id AS run_pk, r.started_at, r.device_id, c.sha
    FROM latest l
        JOIN devices d ON d.model = l.device_model
        CROSS JOIN LATERAL (
            SELECT id, started_at, commit_id, device_id FROM runs
            WHERE device_id = d.id AND repository_id = l.repository_id
                AND trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial')
                AND started_at < l.started_at
            ORDER BY started_at DESC LIMIT 1
        ) r
        LEFT JOIN commits c ON c.id = r.commit_id
    ORDER BY l.repository_id, l.device_model, r.started_at DESC
), newest AS (
    SELECT repository_id, max(started_at) AS newest_at FROM latest GROUP BY repository_id
), failed AS (
    SELECT l.run_pk AS latest_pk,
        count(*) FILTER (WHERE f.started_at > p.started_at AND f.started_at < l.started_at)
            AS failed_between,
        count(*) FILTER (WHERE f.started_at > l.started_at) AS failed_after
    FROM latest l
        JOIN previous p ON p.latest_pk = l.run_pk
        JOIN devices d ON d.model = l.device_model
        JOIN runs f ON f.device_id = d.id AND f.repository_id = l.repository_id
            AND f.trigger IN ('nightly', 'manual') AND f.status NOT IN ('ok', 'partial')
            AND f.started_at > p.started_at
    GROUP BY l.run_pk
), suspects AS (
    -- the latest suspect of each series the latest nightlies suspected, with its evidence
    SELECT DISTINCT ON (ns.run_id, ns.series_id) ns.run_id, ns.series_id, ns.outcome,
        ns.suspicion, ns.verdict, ns.ratio, ns.ci_low, ns.ci_high, ns.p_value,
        ns.regression_id, ab_base.sha AS base_sha, ab_head.sha AS head_sha, g.magnitude
    FROM night_suspects ns
        LEFT JOIN commits ab_base ON ab_base.id = ns.base_commit_id
        LEFT JOIN commits ab_head ON ab_head.id = ns.head_commit_id
        LEFT JOIN regressions g ON g.id = ns.regression_id
    WHERE ns.run_id IN (SELECT run_pk FROM latest) AND ns.series_id IS NOT NULL
    ORDER BY ns.run_id, ns.series_id, ns.id DESC
)
SELECT s.key AS series_key, l.repository, k.name AS kernel, s.dtype, s.case_label,
    s.device_model, s.timer || '/' || s.l2 || '/h' || s.harness_version AS method, l.run_id,
    l.started_at AS night, l.status AS run_status, l.sha AS commit_sha,
    p.started_at AS previous_night, p.sha AS previous_sha, pm.median_ns AS previous_ns,
    m.median_ns AS latest_ns, m.median_ns / pm.median_ns AS night_ratio,
    coalesce(ns.outcome, 'not suspected') AS decided,
    CASE ns.outcome WHEN 'regression' THEN 0 WHEN 'improvement' THEN 1
        WHEN 'unconfirmed' THEN 2 WHEN 'waiting' THEN 2 WHEN 'checked_noise' THEN 3
        ELSE 4 END AS decided_rank,
    ns.suspicion, ns.verdict AS ab_verdict, ns.base_sha AS ab_base_sha,
    ns.head_sha AS ab_head_sha, ns.ratio AS ab_ratio, ns.ci_low AS ab_ci_low,
    ns.ci_high AS ab_ci_high, ns.p_value AS ab_p_value, ns.regression_id, ns.magnitude,
    extract(epoch FROM n.newest_at - l.started_at) / 3600 AS behind_newest_h,
    coalesce(f.failed_between, 0) AS failed_between, coalesce(f.failed_after, 0) AS failed_after,
    p.device_id = l.device_id AS same_gpu
FROM latest l
    JOIN previous p ON p.latest_pk = l.run_pk
    JOIN newest n ON n.repository_id = l.repository_id
    LEFT JOIN failed f ON f.latest_pk = l.run_pk
    JOIN measurements m ON m.run_id = l.run_pk AND m.status = 'ok' AND m.median_ns > 0
    JOIN measurements pm ON pm.run_id = p.run_pk AND pm.series_id = m.series_id
        AND pm.status = 'ok' AND pm.median_ns > 0
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    LEFT JOIN suspects ns ON ns.run_id = l.run_pk AND ns.series_id = m.series_id"""


def _views(lengths: str, steps: str) -> None:
    op.execute(f"CREATE OR REPLACE VIEW report_series_lengths AS {lengths};")
    op.execute(f"CREATE OR REPLACE VIEW report_bisect_steps AS {steps};")
    op.execute(f"GRANT SELECT ON report_series_lengths, report_bisect_steps TO {READER};")


def upgrade() -> None:
    op.execute(
        """
-- Narrow, with room on each page: a young series' count is updated in place (HOT).
CREATE TABLE series_points (
    series_id  int PRIMARY KEY REFERENCES series(id) ON DELETE CASCADE,
    points     int NOT NULL CHECK (points BETWEEN 0 AND 100)
) WITH (fillfactor = 50);
INSERT INTO series_points
SELECT series_id, least(count(*), 100) FROM measurements WHERE history GROUP BY series_id;
CREATE INDEX measurements_comm_idx ON measurements (series_id)
    WHERE busbw_gbps IS NOT NULL;"""
    )
    op.execute(f"CREATE OR REPLACE VIEW report_night_comparison AS {NIGHT_COMPARISON};")
    _views(SERIES_LENGTHS, BISECT_STEPS)
    op.execute(f"CREATE VIEW report_regression_repro AS {REPRO};")
    op.execute(f"GRANT SELECT ON report_regression_repro TO {READER};")


def downgrade() -> None:
    versions = "kernelwatch.store.migrations.versions"
    earlier = importlib.import_module(f"{versions}.0009_honest_dashboards")
    morning = importlib.import_module(f"{versions}.0011_morning_truth").NIGHT_COMPARISON
    op.execute("DROP VIEW report_regression_repro;")
    _views(earlier.NEW_VIEWS["report_series_lengths"], earlier.VIEWS["report_bisect_steps"])
    op.execute(f"CREATE OR REPLACE VIEW report_night_comparison AS {morning};")
    op.execute("DROP INDEX measurements_comm_idx;")
    op.execute("DROP TABLE series_points;")
