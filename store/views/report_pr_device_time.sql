-- Device seconds per PR check (issue 49): both sides' runs' stages (each side's check, the
-- head's A/B), on the pool the check ran on.
CREATE VIEW report_pr_device_time AS
SELECT repo.name AS repository, head.pool, head.run_id, head.started_at,
    coalesce('#' || pc.pr_number, left(hc.sha, 12)) AS pr, hc.sha AS head_sha, pc.outcome,
    (SELECT coalesce(sum(t.device_s), 0) FROM device_time t
     WHERE t.run_id IN (pc.head_run_id, pc.base_run_id)) AS device_s
FROM pr_checks pc
    JOIN runs head ON head.id = pc.head_run_id
    JOIN repositories repo ON repo.id = head.repository_id
    LEFT JOIN commits hc ON hc.id = head.commit_id;
