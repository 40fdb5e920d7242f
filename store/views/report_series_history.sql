-- Every history point of every series, with the change point detected at it; unjudged: a
-- point whose CI stayed wider than its margin (kept out of the level later nights meet).
-- The run's descriptors come from a fenced (OFFSET 0) lateral subquery looked up by
-- primary key per point: the planner then orders 6 relations instead of 9, which halves
-- the planning time, the larger part of this query's latency.
CREATE VIEW report_series_history AS
SELECT 
    s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite, k.name AS kernel,
    s.workload, s.params, s.dtype, s.device_model,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method,
    m.measured_at, m.id AS measurement_id, r.run_id, r.trigger, r.commit_sha,
    r.device_uuid, r.host, 
    m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.p10_ns, m.p90_ns, m.min_ns, m.n,
    m.rel_ci_halfwidth, m.unjudged, m.throttled_count, m.tflops, m.gbps, m.pct_sol, m.speedup,
    cfg.label AS config,
    cp.id AS change_point_id, cp.direction AS change_direction,
    cp.rel_change AS change_rel, cp.regression_id
FROM series s 
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
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
    ) cp ON true;
