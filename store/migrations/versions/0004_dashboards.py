"""Views and functions the Grafana dashboards and alert rules read (``kernelwatch.dashboards``):
a stored case label on ``series``, series descriptors for template variables, history points
with a repro command, change points, bisection steps, build metrics over commits, runs,
triage, the latest nightly run per GPU model, and three functions of the dashboard's time
range (fleet summary per kernel and GPU, kernels that regressed, device health). The panels
hold only filters and macros.

Fleet-wide panels read the latest nightly run per (repository, GPU model) through
``runs_device_time_idx`` and that run's measurements through ``measurements_run_idx``: a few
thousand rows in run order, where "the latest value of every series" would be one history
index descent per series (40 ms at 6,000 series).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
OPEN_STATES = "('untriaged', 'acknowledged', 'investigating')"
HISTORY_TRIGGERS = "('nightly', 'manual')"

# A device is quarantined (its measurements are not to be trusted, and schedulers should
# skip it) when, over the dashboard's range, more than this share of its samples ran
# throttled, its mean relative CI is more than this many times its GPU model's median, or
# at least half of its runs failed.
QUARANTINE_THROTTLED = 0.05
QUARANTINE_NOISE_FACTOR = 2.0
# Hours without a nightly run before the "nightly data missing" alert fires (in the rule's
# threshold, kernelwatch.dashboards.alert_rules); the view only reports the age.

# kernelwatch.harness.build.sass.TENSOR_CORE_RANK, frozen here as this revision's SQL.
_TENSOR_CORE_RANK = """CASE b.tensor_core WHEN 'none' THEN 0 WHEN 'HMMA' THEN 1
        WHEN 'HGMMA' THEN 2 WHEN 'QGMMA' THEN 2 WHEN 'tcgen05' THEN 3 END"""

VIEWS = {
    # One row per series, for template variables and joins.
    "report_series": """
SELECT s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite,
    k.name AS kernel, s.workload, s.params, s.case_label,
    s.dtype, s.device_model, s.timer, s.l2, s.harness_version,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method, s.created_at
FROM series s
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id""",
    # Every history point with the command that measures that commit again the same way.
    "report_history_points": """
SELECT h.*,
    CASE WHEN h.commit_sha IS NOT NULL THEN format(
        'git worktree add /tmp/kw-%1$s %2$s && kernelwatch bench --repo /tmp/kw-%1$s'
        ' --suite %3$s -k %4$s --workload %5$s --dtype %6$s --timer %7$s --l2 %8$s',
        left(h.commit_sha, 12), h.commit_sha, h.suite, h.kernel, h.workload, h.dtype,
        split_part(h.method, '/', 1), split_part(h.method, '/', 2)) END AS repro
FROM report_series_history h""",
    "report_runs": """
SELECT run.run_id, run.trigger, repo.name AS repository, run.suite, c.sha AS commit_sha,
    run.base_sha, run.pool, d.model AS device_model, d.host, d.uuid AS device_uuid,
    run.status, run.started_at, run.finished_at, run.measurements, run.measurement_errors,
    run.samples, run.throttled_samples, run.mean_rel_ci, run.correctness,
    run.correctness_failed, run.builds
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
    LEFT JOIN commits c ON c.id = run.commit_id""",
    # Per repository and GPU model: how long since the last nightly run (any status).
    "report_nightly_freshness": f"""
SELECT repo.name AS repository, d.model AS device_model, max(run.started_at) AS last_run_at,
    extract(epoch FROM now() - max(run.started_at)) / 3600 AS hours_since
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
WHERE run.trigger IN {HISTORY_TRIGGERS}
GROUP BY repo.name, d.model""",
    # The latest nightly (or manual) run that measured (ok or partial) per repository and GPU
    # model: a few backward steps of an index on runs per device and repository.
    "report_latest_nightly_runs": f"""
SELECT DISTINCT ON (repo.id, d.model) repo.id AS repository_id, repo.name AS repository,
    d.model AS device_model, r.id AS run_pk, r.run_id, r.started_at, r.commit_id
FROM repositories repo
    CROSS JOIN devices d
    CROSS JOIN LATERAL (
        SELECT id, run_id, started_at, commit_id FROM runs
        WHERE device_id = d.id AND repository_id = repo.id AND trigger IN {HISTORY_TRIGGERS}
            AND status IN ('ok', 'partial')
        ORDER BY started_at DESC LIMIT 1
    ) r
ORDER BY repo.id, d.model, r.started_at DESC""",
    # Each measurement of those runs with its series' descriptors.
    "report_nightly_latest": """
SELECT rs.series_key, rs.repository, rs.suite, rs.kernel, rs.workload, rs.case_label,
    rs.dtype, rs.device_model, rs.method, lr.run_id, lr.started_at AS measured_at,
    c.sha AS commit_sha, m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.rel_ci_halfwidth,
    m.tflops, m.gbps, m.pct_compute, m.pct_memory, m.pct_sol, m.bound, m.baseline,
    m.baseline_median_ns, m.speedup, cfg.label AS config
FROM report_latest_nightly_runs lr
    JOIN measurements m ON m.run_id = lr.run_pk
    JOIN report_series rs ON rs.series_id = m.series_id
    LEFT JOIN commits c ON c.id = lr.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id""",
    # Per repository, GPU model and kernel, over the latest nightly run: the mean %SOL and
    # the geometric mean of speedups over the stock library.
    "report_nightly_kernels": """
SELECT repository, device_model, kernel, count(*) AS series, max(measured_at) AS latest_at,
    avg(pct_sol) AS mean_pct_sol, exp(avg(ln(NULLIF(speedup, 0)))) AS speedup_geomean
FROM report_nightly_latest
WHERE status = 'ok'
GROUP BY repository, device_model, kernel""",
    "report_change_points": """
SELECT cp.id AS change_point_id, cp.at, cp.detected_at, cp.detector, cp.direction,
    cp.rel_change, cp.before_ns, cp.after_ns, cp.score, c.sha AS commit_sha,
    cp.regression_id, g.state AS regression_state, g.title AS regression_title,
    rs.series_key, rs.repository, rs.kernel, rs.workload, rs.case_label, rs.dtype,
    rs.device_model, rs.method,
    format('%s %s%% at %s%s', cp.direction, to_char(100 * cp.rel_change, 'SG990.0'),
        left(c.sha, 12), ', regression ' || cp.regression_id || ' (' || g.state || ')')
        AS summary
FROM change_points cp
    JOIN report_series rs ON rs.series_id = cp.series_id
    LEFT JOIN commits c ON c.id = cp.commit_id
    LEFT JOIN regressions g ON g.id = cp.regression_id""",
    # probe_time places a verdict at its commit on a history chart; at is when it ran.
    "report_bisect_steps": """
SELECT b.id AS step_id, b.bisect_id, b.step, b.at, probe.author_time AS probe_time,
    b.regression_id, repo.name AS repository, s.key AS series_key, d.model AS device_model,
    d.host, d.uuid AS device_uuid, good.sha AS good_sha, probe.sha AS probe_sha, b.verdict,
    b.ratio, b.ci_low, b.ci_high, b.samples, b.gpu_seconds, b.note,
    format('bisect step %s: %s at %s against %s%s', b.step, b.verdict, left(probe.sha, 12),
        left(good.sha, 12),
        ', ratio ' || round(b.ratio::numeric, 3) || ' [' || round(b.ci_low::numeric, 3)
            || ', ' || round(b.ci_high::numeric, 3) || ']') AS summary
FROM bisect_steps b
    JOIN repositories repo ON repo.id = b.repository_id
    JOIN commits good ON good.id = b.good_commit_id
    JOIN commits probe ON probe.id = b.probe_commit_id
    LEFT JOIN devices d ON d.id = b.device_id
    LEFT JOIN series s ON s.id = b.series_id""",
    "report_build_history": f"""
SELECT b.id AS build_id, run.run_id, run.started_at AS at, run.trigger,
    repo.name AS repository, c.sha AS commit_sha, k.name AS kernel, b.function, b.language,
    b.arch, b.dtype, b.workload, b.case_label, cfg.label AS config, b.status, b.reason,
    b.registers, b.spill_store_bytes, b.spill_load_bytes,
    coalesce(b.spill_store_bytes, 0) + coalesce(b.spill_load_bytes, 0) AS spill_bytes,
    b.stack_bytes, b.shared_static_bytes, b.shared_dynamic_bytes, b.num_warps, b.num_stages,
    b.tensor_core, {_TENSOR_CORE_RANK} AS tensor_core_rank, b.tma_loads,
    b.global_load_bits, b.local_loads, b.local_stores, b.instructions, b.cubin_sha256
FROM build_metrics b
    JOIN runs run ON run.id = b.run_id
    JOIN kernels k ON k.id = b.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = b.config_id""",
    # The builds of each repository's latest nightly run that built anything.
    "report_latest_builds": f"""
SELECT h.* FROM report_build_history h
WHERE h.run_id IN (
    SELECT DISTINCT ON (repository_id) run_id FROM runs
    WHERE builds > 0 AND trigger IN {HISTORY_TRIGGERS}
    ORDER BY repository_id, started_at DESC
)""",
    "report_regression_events": """
SELECT e.id AS event_id, e.regression_id, g.title, repo.name AS repository, e.at, e.actor,
    e.state, e.note
FROM regression_events e
    JOIN regressions g ON g.id = e.regression_id
    JOIN repositories repo ON repo.id = g.repository_id""",
    # report_regressions with what a triager needs on one line: what moved where, the last
    # triage event, and how far bisection got.
    "report_triage_board": """
SELECT g.*, extract(epoch FROM now() - g.created_at) / 86400 AS age_days,
    cps.kernels, cps.device_models, cps.worst_change, ev.at AS last_event_at,
    ev.actor AS last_actor, ev.note AS last_note, coalesce(bis.steps, 0) AS bisect_steps,
    bis.last_verdict, bis.gpu_seconds AS bisect_gpu_seconds
FROM report_regressions g
    LEFT JOIN LATERAL (
        SELECT string_agg(DISTINCT k.name, ', ') AS kernels,
            string_agg(DISTINCT s.device_model, ', ') AS device_models,
            max(cp.rel_change) AS worst_change
        FROM change_points cp
            JOIN series s ON s.id = cp.series_id
            JOIN kernels k ON k.id = s.kernel_id
        WHERE cp.regression_id = g.regression_id
    ) cps ON true
    LEFT JOIN LATERAL (
        SELECT at, actor, note FROM regression_events
        WHERE regression_id = g.regression_id ORDER BY at DESC, id DESC LIMIT 1
    ) ev ON true
    LEFT JOIN LATERAL (
        SELECT count(*) AS steps, sum(gpu_seconds) AS gpu_seconds,
            (array_agg(verdict ORDER BY at DESC, step DESC))[1] AS last_verdict
        FROM bisect_steps WHERE regression_id = g.regression_id
    ) bis ON true""",
    "report_triage_summary": """
SELECT repository, state, open, count(*) AS regressions, min(created_at) AS oldest
FROM report_regressions
GROUP BY repository, state, open""",
}

FUNCTIONS = {
    # Per repository, GPU model and kernel: the latest nightly run against the first nightly
    # run at or after ``since`` (the baseline), over the series both measured: the geometric
    # mean and the worst of the latest/baseline median ratios.
    "report_kernel_drift(since timestamptz)": (
        """TABLE (repository text, device_model text, kernel text, series bigint,
        latest_at timestamptz, baseline_at timestamptz, ratio_geomean double precision,
        ratio_worst double precision)""",
        f"""
WITH compared AS (
    SELECT run_pk, started_at, true AS latest FROM report_latest_nightly_runs
    UNION ALL
    SELECT run_pk, started_at, false FROM (
        SELECT DISTINCT ON (repo.id, d.model) r.id AS run_pk, r.started_at
        FROM repositories repo
            CROSS JOIN devices d
            CROSS JOIN LATERAL (
                SELECT id, started_at FROM runs
                WHERE device_id = d.id AND repository_id = repo.id
                    AND trigger IN {HISTORY_TRIGGERS} AND status IN ('ok', 'partial')
                    AND started_at >= since
                ORDER BY started_at LIMIT 1
            ) r
        ORDER BY repo.id, d.model, r.started_at
    ) baseline
), per_series AS (
    -- Both runs' measurements in one pass, paired by series in one hash aggregate.
    SELECT m.series_id,
        max(c.started_at) FILTER (WHERE c.latest) AS latest_at,
        max(c.started_at) FILTER (WHERE NOT c.latest) AS baseline_at,
        max(m.median_ns) FILTER (WHERE c.latest) AS latest_ns,
        max(m.median_ns) FILTER (WHERE NOT c.latest) AS baseline_ns
    FROM compared c JOIN measurements m ON m.run_id = c.run_pk
    WHERE m.status = 'ok' AND m.median_ns > 0
    GROUP BY m.series_id
)
SELECT repo.name, s.device_model, k.name, count(*), max(p.latest_at), max(p.baseline_at),
    exp(avg(ln(p.latest_ns / p.baseline_ns))), max(p.latest_ns / p.baseline_ns)
FROM per_series p
    JOIN series s ON s.id = p.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
WHERE p.latest_ns IS NOT NULL AND p.baseline_ns IS NOT NULL
GROUP BY repo.name, s.device_model, k.name""",
    ),
    # Per kernel and GPU model: regressions (grouped alerts) whose change points fall in
    # [since, until], with how many series moved and by how much at worst.
    "report_regressed_kernels(since timestamptz, until timestamptz)": (
        """TABLE (repository text, kernel text, device_model text, regressions bigint,
        open_regressions bigint, series bigint, worst_change double precision,
        last_at timestamptz)""",
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
GROUP BY repo.name, k.name, s.device_model""",
    ),
    # Per device over [since, until]: runs, failures, throttling and noise, and whether the
    # device is quarantined by the rule at the top of this file.
    "report_device_health(since timestamptz, until timestamptz)": (
        """TABLE (device_model text, host text, device_uuid text, runs bigint,
        failed_runs bigint, partial_runs bigint, samples numeric, throttled_samples numeric,
        throttled_fraction double precision, mean_rel_ci double precision,
        model_median_rel_ci double precision, last_run_at timestamptz, quarantined boolean,
        reason text)""",
        f"""
WITH per_device AS (
    SELECT d.model, d.host, d.uuid, count(*) AS runs,
        count(*) FILTER (WHERE run.status = 'failed') AS failed_runs,
        count(*) FILTER (WHERE run.status = 'partial') AS partial_runs,
        sum(run.samples) AS samples, sum(run.throttled_samples) AS throttled_samples,
        sum(run.throttled_samples)::float8 / NULLIF(sum(run.samples), 0) AS throttled_fraction,
        avg(run.mean_rel_ci) AS mean_rel_ci, max(run.started_at) AS last_run_at
    FROM runs run JOIN devices d ON d.id = run.device_id
    WHERE run.started_at BETWEEN since AND until
    GROUP BY d.id, d.model, d.host, d.uuid
), per_model AS (
    SELECT model, percentile_cont(0.5) WITHIN GROUP (ORDER BY mean_rel_ci) AS median_rel_ci
    FROM per_device GROUP BY model
), judged AS (
    SELECT p.*, m.median_rel_ci,
        concat_ws('; ',
            CASE WHEN p.throttled_fraction > {QUARANTINE_THROTTLED}
                THEN format('%s%% of samples throttled',
                    round((100 * p.throttled_fraction)::numeric, 1)) END,
            CASE WHEN p.mean_rel_ci > {QUARANTINE_NOISE_FACTOR} * m.median_rel_ci
                THEN format('noise %sx the %s median',
                    round((p.mean_rel_ci / m.median_rel_ci)::numeric, 1), p.model) END,
            CASE WHEN 2 * p.failed_runs >= p.runs
                THEN format('%s of %s runs failed', p.failed_runs, p.runs) END) AS reason
    FROM per_device p JOIN per_model m ON m.model = p.model
)
SELECT model, host, uuid, runs, failed_runs, partial_runs, samples, throttled_samples,
    throttled_fraction, mean_rel_ci, median_rel_ci, last_run_at, reason <> '', reason
FROM judged""",
    ),
}


# The case's parameters as a label ("batch: 0, hidden: 1024"), in jsonb's key order. Stored:
# turning jsonb into text costs ~1 us a row, 7 ms of a fleet-wide panel's 11 ms when computed
# per query.
CASE_LABEL = """ALTER TABLE series ADD COLUMN case_label text
    GENERATED ALWAYS AS (translate(params::text, '{}"', '')) STORED"""


def upgrade() -> None:
    op.execute(CASE_LABEL)
    for name, body in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body};")
    for signature, (returns, body) in FUNCTIONS.items():
        # SECURITY DEFINER, as a view reads with its owner's rights: the reader role may
        # SELECT the report_* views only, not the tables these functions read.
        op.execute(
            f"CREATE FUNCTION {signature} RETURNS {returns} LANGUAGE sql STABLE "
            f"SECURITY DEFINER SET search_path = public, pg_temp AS $fn${body}$fn$;"
        )
    op.execute(f"GRANT SELECT ON {', '.join(VIEWS)} TO {READER};")
    op.execute(f"GRANT EXECUTE ON FUNCTION {', '.join(FUNCTIONS)} TO {READER};")


def downgrade() -> None:
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION {signature};")
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name};")
    op.execute("ALTER TABLE series DROP COLUMN case_label;")
