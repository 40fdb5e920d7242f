CREATE VIEW report_pr_checks AS
SELECT repo.name AS repository, head.run_id, head.started_at, hc.sha AS head_sha,
    bc.sha AS base_sha, d.model AS device_model, d.host, pc.pr_number, pc.branch, pc.author,
    pc.outcome, pc.verdict AS merge_verdict, pc.report AS report_url,
    -- what the PR picker lists: the pull request, else the head commit
    coalesce('#' || pc.pr_number, left(hc.sha, 12)) AS pr
FROM pr_checks pc
    JOIN runs head ON head.id = pc.head_run_id
    JOIN runs base ON base.id = pc.base_run_id
    JOIN repositories repo ON repo.id = head.repository_id
    JOIN devices d ON d.id = head.device_id
    LEFT JOIN commits hc ON hc.id = head.commit_id
    LEFT JOIN commits bc ON bc.id = base.commit_id;
