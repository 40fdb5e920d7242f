CREATE VIEW report_change_points AS
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
    LEFT JOIN regressions g ON g.id = cp.regression_id;
