CREATE VIEW report_run_comparison AS
SELECT run.run_id, run.trigger, run.base_sha, c.sha AS commit_sha, 
    s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite, k.name AS kernel,
    s.workload, s.params, s.dtype, s.device_model,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method,
    
    m.status, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.p10_ns, m.p90_ns, m.min_ns, m.n,
    m.rel_ci_halfwidth, m.throttled_count, m.tflops, m.gbps, m.pct_sol, m.speedup,
    cfg.label AS config,
    ref.median_ns AS reference_median_ns, ref.ci_low_ns AS reference_ci_low_ns,
    ref.ci_high_ns AS reference_ci_high_ns, ref.measured_at AS reference_measured_at,
    m.median_ns / NULLIF(ref.median_ns, 0) AS ratio
FROM measurements m
    JOIN runs run ON run.id = m.run_id
    JOIN series s ON s.id = m.series_id 
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id
    LEFT JOIN LATERAL (
        SELECT * FROM measurements
        WHERE series_id = m.series_id AND history
        ORDER BY measured_at DESC, id DESC LIMIT 1
    ) ref ON true;
