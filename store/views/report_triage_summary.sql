CREATE VIEW report_triage_summary AS
SELECT repository, state, open, count(*) AS regressions, min(created_at) AS oldest
FROM report_regressions
GROUP BY repository, state, open;
