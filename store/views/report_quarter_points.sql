CREATE VIEW report_quarter_points AS
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.case_label, rs.device_model,
    rs.method, rs.kernel || ' ' || rs.dtype || ' ' || rs.case_label || ' on ' || rs.device_model AS case_text, m.measured_at, c.sha AS commit_sha,
    -- the nightlies measure one commit each: a point's place in its series is its commit's
    -- place on the branch (partitioned by series, so a filter on it is applied first)
    row_number() OVER (PARTITION BY rs.series_key ORDER BY m.measured_at) AS commit_index,
    m.median_ns, m.baseline, m.baseline_median_ns, m.tflops, m.gbps, m.pct_sol, m.speedup
FROM measurements m
    JOIN report_series rs ON rs.series_id = m.series_id
    JOIN runs r ON r.id = m.run_id
    LEFT JOIN commits c ON c.id = r.commit_id
WHERE m.history AND m.status = 'ok';
