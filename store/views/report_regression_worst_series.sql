CREATE VIEW report_regression_worst_series AS
SELECT DISTINCT ON (cp.regression_id) cp.regression_id, rs.series_key, rs.repository,
    rs.kernel, rs.dtype, rs.case_label, rs.device_model, cp.at, cp.rel_change
FROM change_points cp
    JOIN report_series rs ON rs.series_id = cp.series_id
WHERE cp.regression_id IS NOT NULL
ORDER BY cp.regression_id, abs(cp.rel_change) DESC, rs.series_key;
