CREATE VIEW report_change_points AS
SELECT cp.id AS change_point_id, cp.at, cp.detected_at, cp.detector, cp.direction,
    cp.rel_change, cp.before_ns, cp.after_ns, cp.score, c.sha AS commit_sha,
    cp.regression_id, g.state AS regression_state, g.title AS regression_title,
    rs.series_key, rs.repository, rs.kernel, rs.workload, rs.case_label, rs.dtype,
    rs.device_model, rs.method,
    -- a drift (issue 47): its slope per night, where it stopped (NULL while open)
    CASE WHEN cp.drift_slope IS NULL THEN 'step' ELSE 'drift' END AS kind,
    cp.drift_slope, cp.drift_open, CASE WHEN NOT cp.drift_open THEN ec.sha END AS drift_end_sha,
    CASE WHEN cp.drift_slope IS NULL
        THEN format('%s %s%% at %s', cp.direction, to_char(100 * cp.rel_change, 'SG990.0'),
            left(c.sha, 12))
        ELSE format('drifting %s%%/night since %s, %s%% in all%s',
            to_char(100 * cp.drift_slope, 'FMSG990.00'), left(c.sha, 12),
            to_char(100 * cp.rel_change, 'FMSG990.0'),
            CASE WHEN cp.drift_open THEN ', still drifting'
                ELSE ', until ' || left(ec.sha, 12) END)
    END || coalesce(', regression ' || cp.regression_id || ' (' || g.state || ')', '')
        AS summary
FROM change_points cp
    JOIN report_series rs ON rs.series_id = cp.series_id
    LEFT JOIN commits c ON c.id = cp.commit_id
    LEFT JOIN regressions g ON g.id = cp.regression_id
    LEFT JOIN measurements em ON em.id = cp.drift_end_measurement_id
    LEFT JOIN runs er ON er.id = em.run_id
    LEFT JOIN commits ec ON ec.id = er.commit_id;
