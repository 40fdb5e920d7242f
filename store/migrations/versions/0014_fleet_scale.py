"""The dashboards fast on a year of fleet history (issue 30).

- ``series.history_points``: the history points of each series, counted at ingest
  (``kernelwatch.store.night_stats``) and here for the points stored before;
  ``report_series_lengths`` reads it instead of counting 2.3 million measurements per call
  (the "series too short to judge" count took 1.4 s at fleet scale).
- ``measurements_comm_idx``: the few measurements with a bus bandwidth (collectives), so the
  communication dashboard finds them without scanning every measurement.
- ``report_bisect_steps.probe_run_at`` is read from ``runs`` alone: the first history run of
  the probed commit on the step's GPU model; for a commit no nightly measured (one of
  several merged on one night), the first history run after both its author time and the
  step's good commit's first run, which is the nightly it first ran in. It used to scan the
  measurements of those runs, and to fall back on the author time, days before the night.
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
    s.history_points::bigint AS points
FROM report_series rs JOIN series s ON s.id = rs.series_id"""

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


def _views(lengths: str, steps: str) -> None:
    op.execute(f"CREATE OR REPLACE VIEW report_series_lengths AS {lengths};")
    op.execute(f"CREATE OR REPLACE VIEW report_bisect_steps AS {steps};")
    op.execute(f"GRANT SELECT ON report_series_lengths, report_bisect_steps TO {READER};")


def upgrade() -> None:
    op.execute(
        """
ALTER TABLE series ADD COLUMN history_points int NOT NULL DEFAULT 0;
UPDATE series s SET history_points = c.n
FROM (SELECT series_id, count(*) AS n FROM measurements WHERE history GROUP BY series_id) c
WHERE c.series_id = s.id;
CREATE INDEX measurements_comm_idx ON measurements (series_id)
    WHERE busbw_gbps IS NOT NULL;"""
    )
    _views(SERIES_LENGTHS, BISECT_STEPS)
    op.execute(f"CREATE VIEW report_regression_repro AS {REPRO};")
    op.execute(f"GRANT SELECT ON report_regression_repro TO {READER};")


def downgrade() -> None:
    op.execute("DROP VIEW report_regression_repro;")
    earlier = importlib.import_module(
        "kernelwatch.store.migrations.versions.0009_honest_dashboards"
    )
    _views(earlier.NEW_VIEWS["report_series_lengths"], earlier.VIEWS["report_bisect_steps"])
    op.execute("DROP INDEX measurements_comm_idx; ALTER TABLE series DROP COLUMN history_points;")
