CREATE VIEW report_regressions AS
SELECT g.id AS regression_id, repo.name AS repository, g.title, g.state,
    g.state IN ('untriaged', 'acknowledged', 'investigating') AS open, g.cause, g.magnitude,
    good.sha AS good_sha, bad.sha AS bad_sha, culprit.sha AS culprit_sha,
    g.assignee, g.bug_url, g.notes, g.created_at, g.updated_at, g.resolved_at,
    (SELECT count(*) FROM change_points cp WHERE cp.regression_id = g.id) AS change_points,
    g.kind, g.opened_by
FROM regressions g
    LEFT JOIN repositories repo ON repo.id = g.repository_id
    LEFT JOIN commits good ON good.id = g.good_commit_id
    LEFT JOIN commits bad ON bad.id = g.bad_commit_id
    LEFT JOIN commits culprit ON culprit.id = g.culprit_commit_id;
