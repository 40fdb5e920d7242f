-- History points per series: detection needs enough of them before it can judge.
CREATE VIEW report_series_lengths AS
SELECT rs.series_key, rs.repository, rs.kernel, rs.device_model,
    coalesce(p.points, 0)::bigint AS points
FROM report_series rs LEFT JOIN series_points p ON p.series_id = rs.series_id;
