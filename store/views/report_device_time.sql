-- Device seconds per run and stage (issue 49): the wall time each stage held the device by
-- the parent's clock, its rows summed (the same night's A/B may add more than one).
CREATE VIEW report_device_time AS
SELECT repo.name AS repository, r.pool, r.trigger, r.run_id, c.sha, r.started_at,
    t.stage, sum(t.device_s) AS device_s, sum(t.cases)::bigint AS cases
FROM device_time t
    JOIN runs r ON r.id = t.run_id
    JOIN repositories repo ON repo.id = r.repository_id
    LEFT JOIN commits c ON c.id = r.commit_id
GROUP BY repo.name, r.pool, r.trigger, r.run_id, c.sha, r.started_at, t.stage;
