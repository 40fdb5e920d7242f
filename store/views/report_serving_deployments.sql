CREATE VIEW report_serving_deployments AS
SELECT d.id AS deployment_id, d.name AS deployment, d.model, d.engine, d.gpu, d.gpu_count,
    d.tp, d.ep, d.load, d.dataset,
    count(r.id) FILTER (WHERE r.status = 'ok') AS ok_runs,
    count(r.id) FILTER (WHERE r.status = 'failed') AS failed_runs,
    min(r.started_at) AS first_run_at, max(r.started_at) AS last_run_at,
    coalesce(bool_or(r.simulated), false) AS simulated
FROM deployments d LEFT JOIN serving_runs r ON r.deployment_id = d.id
GROUP BY d.id;
