CREATE VIEW report_night_comparison_top AS
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
    ORDER BY l.repository_id, l.device_model, r.started_at DESC, r.id DESC
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
), picked AS (
    SELECT run_id AS run_pk, series_id FROM suspects
    UNION
    SELECT run_pk, series_id FROM night_movers WHERE run_pk IN (SELECT run_pk FROM latest)
)
SELECT lp.series_key, l.repository, lp.kernel, lp.dtype, lp.case_label,
    lp.device_model, lp.method, l.run_id,
    l.started_at AS night, l.status AS run_status, l.sha AS commit_sha,
    p.started_at AS previous_night, p.sha AS previous_sha, lp.previous_median_ns AS previous_ns,
    lp.median_ns AS latest_ns, lp.median_ns / lp.previous_median_ns AS night_ratio,
    coalesce(ns.outcome, 'not suspected') AS decided,
    -- the order a morning reads the outcomes in: what was confirmed, then what is still
    -- open, then what an A/B cleared, then the rest
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
    JOIN picked k ON k.run_pk = l.run_pk
    JOIN latest_points lp ON lp.series_id = k.series_id AND lp.run_pk = l.run_pk AND lp.previous_run_pk = p.run_pk
        AND lp.status = 'ok' AND lp.median_ns > 0
        AND lp.previous_status = 'ok' AND lp.previous_median_ns > 0
    LEFT JOIN suspects ns ON ns.run_id = l.run_pk AND ns.series_id = lp.series_id;
