CREATE VIEW report_serving_changes AS
SELECT d.name AS deployment, sc.metric, sc.direction, sc.rel_change, sc.provisional,
    r.started_at AS at, r.kernel_commit, p.started_at AS previous_at,
    p.kernel_commit AS previous_kernel_commit, sc.regression_id, g.state,
    g.state IN ('untriaged', 'acknowledged', 'investigating') AS open, sc.explained_pct, sc.explanation
FROM serving_changes sc
    JOIN deployments d ON d.id = sc.deployment_id
    JOIN serving_runs r ON r.id = sc.run_pk
    JOIN serving_runs p ON p.id = sc.previous_run_pk
    LEFT JOIN regressions g ON g.id = sc.regression_id;
