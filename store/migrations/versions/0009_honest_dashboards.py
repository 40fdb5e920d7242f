"""Honest numbers on the dashboards and alerts (issue 21).

- ``report_regressed_kernels`` counts only regressions that are not ``false_positive`` or
  ``wont_fix``: a dismissed regression is not a kernel that regressed.
- ``report_bisect_steps`` gains ``probe_run_at``, when the probed commit was first measured by
  a nightly on the step's GPU model, so a verdict is marked on the history chart at the point
  it judged (a commit authored days before it merged is otherwise marked days early).
- ``report_latest_nightly_runs`` gains the run's ``status``, ``report_nightly_latest`` its
  ``run_status`` and ``report_nightly_kernels`` ``partial_runs``: a partial run is marked.
- ``report_pool_freshness``: hours since each pool's last nightly per repository and GPU
  model, so pipeline alerts can be limited to the configured pools.
- ``report_series_lengths``: history points per series, for the "too short to judge" count.
- ``report_night_comparison``: the morning-after view, per series the latest nightly against
  the nightly before it on the same GPU model (ratio of medians, with an interval from the
  two stored median CIs), with the same night's A/B verdict when the series was suspected.
- ``report_regression_worst_series``: per regression the series that moved most, where a
  link from the regression to a history goes; ``report_triage_links``: the triage board
  with those columns.
- ``report_quarter_points``: every history point with the case as one text
  (``kernel dtype case on GPU``), its place in the series (commit order), ours and the baseline
  library's medians, throughput and %SOL, for the several-cases history.
- ``pr_findings`` and ``report_pr_findings``: what a PR check concluded (each case's A/B
  verdict with ratio and CI, static findings, correctness failures) and where its comparison
  report is, for the PR dashboard (the verdicts are computed when the check runs, from the
  stored samples and that day's thresholds, and kept as they were reported).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
#: One case as text everywhere a person reads it: ``kernel dtype case on GPU``.
CASE_TEXT = "rs.kernel || ' ' || rs.dtype || ' ' || rs.case_label || ' on ' || rs.device_model"
OPEN_STATES = "('untriaged', 'acknowledged', 'investigating')"
DISMISSED_STATES = "('false_positive', 'wont_fix')"
HISTORY_TRIGGERS = "('nightly', 'manual')"

REGRESSED_KERNELS = (
    "report_regressed_kernels(since timestamptz, until timestamptz)",
    f"""
SELECT repo.name, k.name, s.device_model, count(DISTINCT cp.regression_id),
    count(DISTINCT cp.regression_id) FILTER (WHERE g.state IN {OPEN_STATES}),
    count(DISTINCT cp.series_id), max(cp.rel_change), max(cp.at)
FROM change_points cp
    JOIN regressions g ON g.id = cp.regression_id
    JOIN series s ON s.id = cp.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
WHERE cp.direction = 'regression' AND cp.at BETWEEN since AND until
    AND g.state NOT IN {DISMISSED_STATES}
GROUP BY repo.name, k.name, s.device_model""",
)

# Views made again with columns added at their end (each reads the one before it).
VIEWS = {
    "report_latest_nightly_runs": f"""
SELECT DISTINCT ON (repo.id, d.model) repo.id AS repository_id, repo.name AS repository,
    d.model AS device_model, r.id AS run_pk, r.run_id, r.started_at, r.commit_id, r.status
FROM repositories repo
    CROSS JOIN devices d
    CROSS JOIN LATERAL (
        SELECT id, run_id, started_at, commit_id, status FROM runs
        WHERE device_id = d.id AND repository_id = repo.id AND trigger IN {HISTORY_TRIGGERS}
            AND status IN ('ok', 'partial')
        ORDER BY started_at DESC LIMIT 1
    ) r
ORDER BY repo.id, d.model, r.started_at DESC""",
    "report_nightly_latest": """
SELECT rs.series_key, rs.repository, rs.suite, rs.kernel, rs.workload, rs.case_label,
    rs.dtype, rs.device_model, rs.method, lr.run_id, lr.started_at AS measured_at,
    c.sha AS commit_sha, m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.rel_ci_halfwidth,
    m.tflops, m.gbps, m.pct_compute, m.pct_memory, m.pct_sol, m.bound, m.baseline,
    m.baseline_median_ns, m.speedup, cfg.label AS config, lr.status AS run_status
FROM report_latest_nightly_runs lr
    JOIN measurements m ON m.run_id = lr.run_pk
    JOIN report_series rs ON rs.series_id = m.series_id
    LEFT JOIN commits c ON c.id = lr.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id""",
    "report_nightly_kernels": """
SELECT repository, device_model, kernel, count(*) AS series, max(measured_at) AS latest_at,
    avg(pct_sol) AS mean_pct_sol, exp(avg(ln(NULLIF(speedup, 0)))) AS speedup_geomean,
    count(DISTINCT run_id) FILTER (WHERE run_status = 'partial') AS partial_runs
FROM report_nightly_latest
WHERE status = 'ok'
GROUP BY repository, device_model, kernel""",
    "report_bisect_steps": f"""
SELECT b.id AS step_id, b.bisect_id, b.step, b.at, probe.author_time AS probe_time,
    b.regression_id, repo.name AS repository, s.key AS series_key, d.model AS device_model,
    d.host, d.uuid AS device_uuid, good.sha AS good_sha, probe.sha AS probe_sha, b.verdict,
    b.ratio, b.ci_low, b.ci_high, b.samples, b.gpu_seconds, b.note,
    format('bisect step %s: %s at %s against %s%s', b.step, b.verdict, left(probe.sha, 12),
        left(good.sha, 12),
        ', ratio ' || round(b.ratio::numeric, 3) || ' [' || round(b.ci_low::numeric, 3)
            || ', ' || round(b.ci_high::numeric, 3) || ']') AS summary,
    (SELECT min(m.measured_at) FROM runs r
        JOIN devices rd ON rd.id = r.device_id
        JOIN measurements m ON m.run_id = r.id AND m.history
     WHERE r.commit_id = b.probe_commit_id AND r.repository_id = b.repository_id
        AND r.trigger IN {HISTORY_TRIGGERS} AND (d.model IS NULL OR rd.model = d.model))
        AS probe_run_at
FROM bisect_steps b
    JOIN repositories repo ON repo.id = b.repository_id
    JOIN commits good ON good.id = b.good_commit_id
    JOIN commits probe ON probe.id = b.probe_commit_id
    LEFT JOIN devices d ON d.id = b.device_id
    LEFT JOIN series s ON s.id = b.series_id""",
}

NEW_VIEWS = {
    # Per repository, pool and GPU model: hours since the last nightly run (any status).
    "report_pool_freshness": """
SELECT repo.name AS repository, coalesce(run.pool, '') AS pool, d.model AS device_model,
    max(run.started_at) AS last_run_at,
    extract(epoch FROM now() - max(run.started_at)) / 3600 AS hours_since
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
WHERE run.trigger = 'nightly'
GROUP BY repo.name, coalesce(run.pool, ''), d.model""",
    # History points per series: detection needs enough of them before it can judge.
    "report_series_lengths": """
SELECT rs.series_key, rs.repository, rs.kernel, rs.device_model, count(m.id) AS points
FROM report_series rs
    LEFT JOIN measurements m ON m.series_id = rs.series_id AND m.history
GROUP BY rs.series_key, rs.repository, rs.kernel, rs.device_model""",
}

NEW_VIEWS |= {
    "report_night_comparison": f"""
WITH previous AS (
    SELECT DISTINCT ON (l.repository_id, l.device_model) l.run_pk AS latest_pk,
        r.id AS run_pk, r.commit_id
    FROM report_latest_nightly_runs l
        JOIN devices d ON d.model = l.device_model
        CROSS JOIN LATERAL (
            SELECT id, started_at, commit_id FROM runs
            WHERE device_id = d.id AND repository_id = l.repository_id
                AND trigger IN {HISTORY_TRIGGERS} AND status IN ('ok', 'partial')
                AND started_at < l.started_at
            ORDER BY started_at DESC LIMIT 1
        ) r
    ORDER BY l.repository_id, l.device_model, r.started_at DESC
)
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.case_label, rs.device_model,
    rs.method, l.run_id, l.started_at AS night, l.status AS run_status, lc.sha AS commit_sha,
    pc.sha AS previous_sha, pm.median_ns AS previous_ns, m.median_ns AS latest_ns,
    m.median_ns / pm.median_ns AS ratio,
    m.ci_low_ns / NULLIF(pm.ci_high_ns, 0) AS ratio_ci_low,
    m.ci_high_ns / NULLIF(pm.ci_low_ns, 0) AS ratio_ci_high,
    ns.verdict, ns.outcome, ns.regression_id
FROM report_latest_nightly_runs l
    JOIN previous p ON p.latest_pk = l.run_pk
    JOIN measurements m ON m.run_id = l.run_pk AND m.status = 'ok' AND m.median_ns > 0
    JOIN measurements pm ON pm.run_id = p.run_pk AND pm.series_id = m.series_id
        AND pm.status = 'ok' AND pm.median_ns > 0
    JOIN report_series rs ON rs.series_id = m.series_id
    LEFT JOIN commits lc ON lc.id = l.commit_id
    LEFT JOIN commits pc ON pc.id = p.commit_id
    LEFT JOIN LATERAL (
        SELECT verdict, outcome, regression_id FROM night_suspects
        WHERE run_id = l.run_pk AND series_id = m.series_id ORDER BY id DESC LIMIT 1
    ) ns ON true""",
    "report_regression_worst_series": """
SELECT DISTINCT ON (cp.regression_id) cp.regression_id, rs.series_key, rs.repository,
    rs.kernel, rs.dtype, rs.case_label, rs.device_model, cp.at, cp.rel_change
FROM change_points cp
    JOIN report_series rs ON rs.series_id = cp.series_id
WHERE cp.regression_id IS NOT NULL
ORDER BY cp.regression_id, abs(cp.rel_change) DESC, rs.series_key""",
}

NEW_VIEWS["report_quarter_points"] = f"""
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.case_label, rs.device_model,
    rs.method, {CASE_TEXT} AS case_text, m.measured_at, c.sha AS commit_sha,
    -- the nightlies measure one commit each: a point's place in its series is its commit's
    -- place on the branch (partitioned by series, so a filter on it is applied first)
    row_number() OVER (PARTITION BY rs.series_key ORDER BY m.measured_at) AS commit_index,
    m.median_ns, m.baseline, m.baseline_median_ns, m.tflops, m.gbps, m.pct_sol, m.speedup
FROM measurements m
    JOIN report_series rs ON rs.series_id = m.series_id
    JOIN runs r ON r.id = m.run_id
    LEFT JOIN commits c ON c.id = r.commit_id
WHERE m.history AND m.status = 'ok'"""

# The triage board with where each regression's links go (its worst-moved series).
NEW_VIEWS["report_triage_links"] = """
SELECT b.*, w.series_key, w.kernel, w.dtype, w.device_model, w.at AS change_at
FROM report_triage_board b
    LEFT JOIN report_regression_worst_series w ON w.regression_id = b.regression_id"""

# The cases the several-cases history offers, with the same text.
NEW_VIEWS["report_quarter_cases"] = f"""
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.device_model, rs.method,
    {CASE_TEXT} AS case_text
FROM report_series rs"""

PR_FINDINGS = """
CREATE TABLE pr_findings (
    id           bigserial PRIMARY KEY,
    head_run_id  bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    base_run_id  bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('timing', 'static', 'correctness')),
    kernel       text NOT NULL,
    case_label   text NOT NULL,
    dtype        text NOT NULL,
    -- timing: the A/B verdict; static: the rule; correctness: the check's verdict
    verdict      text NOT NULL,
    ratio        double precision,
    ci_low       double precision,
    ci_high      double precision,
    p_value      double precision,
    detail       text NOT NULL DEFAULT '',
    report       text
);
CREATE INDEX pr_findings_head_idx ON pr_findings (head_run_id);"""

NEW_VIEWS["report_pr_findings"] = """
SELECT f.id AS finding_id, repo.name AS repository, head.run_id, head.started_at,
    hc.sha AS head_sha, bc.sha AS base_sha, d.model AS device_model, f.kind, f.kernel,
    f.case_label, f.dtype, f.verdict, f.ratio, f.ci_low, f.ci_high, f.p_value, f.detail,
    f.report
FROM pr_findings f
    JOIN runs head ON head.id = f.head_run_id
    JOIN runs base ON base.id = f.base_run_id
    JOIN repositories repo ON repo.id = head.repository_id
    JOIN devices d ON d.id = head.device_id
    LEFT JOIN commits hc ON hc.id = head.commit_id
    LEFT JOIN commits bc ON bc.id = base.commit_id"""


def _function(signature: str, body: str) -> str:
    return (
        f"CREATE OR REPLACE FUNCTION {signature} RETURNS TABLE (repository text, kernel text, "
        "device_model text, regressions bigint, open_regressions bigint, series bigint, "
        "worst_change double precision, last_at timestamptz) LANGUAGE sql STABLE "
        f"SECURITY DEFINER SET search_path = public, pg_temp AS $fn${body}$fn$;"
    )


def _recreate(definitions: dict[str, str]) -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name};")
    for name in VIEWS:
        op.execute(f"CREATE VIEW {name} AS {definitions[name]};")
    op.execute(f"GRANT SELECT ON {', '.join(VIEWS)} TO {READER};")


def upgrade() -> None:
    op.execute(PR_FINDINGS)
    _recreate(VIEWS)
    for name, body in NEW_VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body};")
    op.execute(f"GRANT SELECT ON {', '.join(NEW_VIEWS)} TO {READER};")
    op.execute(_function(*REGRESSED_KERNELS))


def downgrade() -> None:
    earlier = importlib.import_module("kernelwatch.store.migrations.versions.0004_dashboards")
    signature = REGRESSED_KERNELS[0]
    op.execute(_function(signature, earlier.FUNCTIONS[signature][1]))
    for name in reversed(NEW_VIEWS):
        op.execute(f"DROP VIEW {name};")
    _recreate(earlier.VIEWS)
    op.execute("DROP TABLE pr_findings;")
