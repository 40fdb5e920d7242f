CREATE VIEW report_serving_regressions AS
SELECT g.id AS regression_id, d.name AS deployment, g.title, g.state,
    g.state IN ('untriaged', 'acknowledged', 'investigating') AS open, g.magnitude, g.created_at,
    bool_and(sc.provisional) AS provisional,
    string_agg(sc.metric, ', ' ORDER BY abs(sc.rel_change) DESC) AS metrics,
    min(r.started_at) AS at, min(r.kernel_commit) AS kernel_commit,
    min(p.kernel_commit) AS previous_kernel_commit,
    (array_agg(sc.explanation ORDER BY abs(sc.rel_change) DESC)
        FILTER (WHERE sc.explanation IS NOT NULL))[1] AS explanation
FROM regressions g
    JOIN deployments d ON d.id = g.deployment_id
    JOIN serving_changes sc ON sc.regression_id = g.id
    JOIN serving_runs r ON r.id = sc.run_pk
    JOIN serving_runs p ON p.id = sc.previous_run_pk
GROUP BY g.id, d.name;
