-- Each ok run that served another kernel commit than the ok run before it. A kernel commit
-- as a serving job names it (often abbreviated) is resolved to the one stored commit it is a
-- prefix of; an ambiguous or unknown one stays unresolved.
CREATE VIEW report_serving_deploys AS
SELECT x.deployment, x.started_at, x.kernel_commit, x.previous_kernel_commit,
    (SELECT c.id FROM commits c
        WHERE length(x.kernel_commit) >= 7 AND c.sha LIKE x.kernel_commit || '%'
    AND (SELECT count(*) FROM commits o WHERE o.sha LIKE x.kernel_commit || '%') = 1) AS commit_id,
    (SELECT c.id FROM commits c
        WHERE length(x.previous_kernel_commit) >= 7 AND c.sha LIKE x.previous_kernel_commit || '%'
    AND (SELECT count(*) FROM commits o
        WHERE o.sha LIKE x.previous_kernel_commit || '%') = 1) AS previous_commit_id
FROM (
    SELECT d.name AS deployment, r.started_at, r.kernel_commit,
        lag(r.kernel_commit) OVER (PARTITION BY r.deployment_id ORDER BY r.started_at, r.id)
            AS previous_kernel_commit
    FROM serving_runs r JOIN deployments d ON d.id = r.deployment_id
    WHERE r.status = 'ok'
) x
WHERE x.previous_kernel_commit IS DISTINCT FROM x.kernel_commit;
