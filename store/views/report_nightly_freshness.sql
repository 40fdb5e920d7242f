-- Per repository and GPU model: how long since the last nightly run (any status).
CREATE VIEW report_nightly_freshness AS
SELECT repo.name AS repository, d.model AS device_model, max(run.started_at) AS last_run_at,
    extract(epoch FROM now() - max(run.started_at)) / 3600 AS hours_since
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
WHERE run.trigger IN ('nightly', 'manual')
GROUP BY repo.name, d.model;
