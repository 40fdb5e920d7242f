-- Each series' latest history point. History lines are drawn from the tracked branch
-- (measurements.history: nightly and manual runs); PR and bisect runs are comparisons, shown
-- against the latest value. The latest value of a series is the last entry of
-- measurements_history_idx: one index descent per series.
CREATE VIEW report_latest AS
SELECT 
    s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite, k.name AS kernel,
    s.workload, s.params, s.dtype, s.device_model,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method,
    m.measured_at, run.run_id, run.trigger, c.sha AS commit_sha, 
    m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.p10_ns, m.p90_ns, m.min_ns, m.n,
    m.rel_ci_halfwidth, m.throttled_count, m.tflops, m.gbps, m.pct_sol, m.speedup,
    cfg.label AS config
FROM series s 
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    CROSS JOIN LATERAL (
        SELECT * FROM measurements
        WHERE series_id = s.id AND history
        ORDER BY measured_at DESC, id DESC LIMIT 1
    ) m
    JOIN runs run ON run.id = m.run_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id;
