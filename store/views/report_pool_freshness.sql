-- Per repository, pool and GPU model: hours since the last nightly run (any status).
CREATE VIEW report_pool_freshness AS
SELECT repo.name AS repository, coalesce(run.pool, '') AS pool, d.model AS device_model,
    max(run.started_at) AS last_run_at,
    extract(epoch FROM now() - max(run.started_at)) / 3600 AS hours_since
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
WHERE run.trigger = 'nightly'
GROUP BY repo.name, coalesce(run.pool, ''), d.model;
