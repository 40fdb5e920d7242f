CREATE VIEW report_serving_kernel_regressions AS
SELECT dp.deployment, dp.started_at, dp.kernel_commit, g.id AS regression_id, g.kind,
    g.title, g.state, g.state IN ('untriaged', 'acknowledged', 'investigating') AS open, g.magnitude, bad.sha AS commit_sha,
    repo.name AS repository
FROM report_serving_deploys dp
    JOIN commits now_c ON now_c.id = dp.commit_id
    JOIN commits was_c ON was_c.id = dp.previous_commit_id
        AND was_c.repository_id = now_c.repository_id
    JOIN regressions g ON g.repository_id = now_c.repository_id AND g.kind <> 'serving'
    JOIN commits bad ON bad.id = coalesce(g.culprit_commit_id, g.bad_commit_id)
    JOIN repositories repo ON repo.id = now_c.repository_id
WHERE bad.author_time > was_c.author_time AND bad.author_time <= now_c.author_time;
