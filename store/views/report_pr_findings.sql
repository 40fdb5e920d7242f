CREATE VIEW report_pr_findings AS
SELECT f.id AS finding_id, repo.name AS repository, head.run_id, head.started_at, hc.sha AS head_sha,
    bc.sha AS base_sha, d.model AS device_model, d.host, pc.pr_number, pc.branch, pc.author,
    pc.outcome, pc.verdict AS merge_verdict, pc.report AS report_url,
    -- what the PR picker lists: the pull request, else the head commit
    coalesce('#' || pc.pr_number, left(hc.sha, 12)) AS pr, f.kind, f.kernel, f.case_label, f.dtype,
    f.verdict, f.ratio, f.ci_low, f.ci_high, f.p_value, f.base_ns, f.head_ns, f.arch,
    f.function, f.before_value, f.after_value, f.detail
FROM pr_findings f
    JOIN pr_checks pc ON pc.head_run_id = f.head_run_id
    JOIN runs head ON head.id = pc.head_run_id
    JOIN runs base ON base.id = pc.base_run_id
    JOIN repositories repo ON repo.id = head.repository_id
    JOIN devices d ON d.id = head.device_id
    LEFT JOIN commits hc ON hc.id = head.commit_id
    LEFT JOIN commits bc ON bc.id = base.commit_id;
