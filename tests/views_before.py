"""Reporting definitions as they were before the store kept their inputs at ingest
(``latest_points``, migration 0016; ``night_kernel_stats``, 0013; ``night_movers``, 0017):
each read the measurements directly. ``test_dashboards.py`` checks that today's views
(``store/views/``) give the rows these gave, on the seeded history."""

# report_nightly_latest: each measurement of the latest nightly runs with its series' names.
NIGHTLY_LATEST = """
SELECT rs.series_key, rs.repository, rs.suite, rs.kernel, rs.workload, rs.case_label,
    rs.dtype, rs.device_model, rs.method, lr.run_id, lr.started_at AS measured_at,
    c.sha AS commit_sha, m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.rel_ci_halfwidth,
    m.tflops, m.gbps, m.pct_compute, m.pct_memory, m.pct_sol, m.bound, m.baseline,
    m.baseline_median_ns, m.speedup, cfg.label AS config, lr.status AS run_status
FROM report_latest_nightly_runs lr
    JOIN measurements m ON m.run_id = lr.run_pk
    JOIN report_series rs ON rs.series_id = m.series_id
    LEFT JOIN commits c ON c.id = lr.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id"""

# report_nightly_kernels: per repository, GPU model and kernel over the latest nightly runs.
NIGHTLY_KERNELS = """
SELECT repository, device_model, kernel, count(*) AS series, max(measured_at) AS latest_at,
    avg(pct_sol) AS mean_pct_sol, exp(avg(ln(NULLIF(speedup, 0)))) AS speedup_geomean,
    count(DISTINCT run_id) FILTER (WHERE run_status = 'partial') AS partial_runs
FROM report_nightly_latest
WHERE status = 'ok'
GROUP BY repository, device_model, kernel"""

# report_night_comparison: the latest nightly against the one before it, from the measurements.
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

# report_kernel_drift(since): both nightlies' measurements paired by series.
KERNEL_DRIFT_RETURNS = """TABLE (repository text, device_model text, kernel text, series bigint,
        latest_at timestamptz, baseline_at timestamptz, ratio_geomean double precision,
        ratio_worst double precision)"""
KERNEL_DRIFT = """
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
                    AND trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial')
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
GROUP BY repo.name, s.device_model, k.name"""
