CREATE VIEW report_serving_metrics AS
SELECT d.name AS deployment, r.id AS run_pk, r.started_at, r.kernel_commit, r.engine_version,
    r.simulated, d.gpu, d.gpu_count, m.metric, m.value
FROM serving_runs r
    JOIN deployments d ON d.id = r.deployment_id
    JOIN serving_metrics m ON m.run_pk = r.id
WHERE r.status = 'ok';
