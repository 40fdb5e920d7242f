CREATE VIEW report_device_noise AS
SELECT d.id AS device_id, d.model, d.uuid, d.host,
    date_trunc('day', run.started_at) AS day,
    count(*) AS runs, sum(run.measurements) AS measurements,
    sum(run.measurement_errors) AS measurement_errors,
    sum(run.samples) AS samples, sum(run.throttled_samples) AS throttled_samples,
    avg(run.mean_rel_ci) AS mean_rel_ci
FROM runs run JOIN devices d ON d.id = run.device_id
GROUP BY d.id, d.model, d.uuid, d.host, date_trunc('day', run.started_at);
