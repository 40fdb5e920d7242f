-- The triage board with where each regression's links go (its worst-moved series).
CREATE VIEW report_triage_links AS
SELECT b.*, w.series_key, w.kernel, w.dtype, w.device_model, w.at AS change_at
FROM report_triage_board b
    LEFT JOIN report_regression_worst_series w ON w.regression_id = b.regression_id;
