-- The builds of each repository's latest nightly run that built anything.
CREATE VIEW report_latest_builds AS
SELECT h.* FROM report_build_history h
WHERE h.run_id IN (
    SELECT DISTINCT ON (repository_id) run_id FROM runs
    WHERE builds > 0 AND trigger IN ('nightly', 'manual')
    ORDER BY repository_id, started_at DESC
);
