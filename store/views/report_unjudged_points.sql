-- Every unjudged nightly point (issue 47): its 95% CI stayed wider than the margin it would
-- be judged by after it was measured again, so it could not have shown a change that size;
-- kept out of the level later nights are compared with. With its pool, for the fleet's count.
CREATE VIEW report_unjudged_points AS
SELECT repo.name AS repository, run.pool, k.name AS kernel, s.key AS series_key, s.dtype,
    s.device_model, m.measured_at, c.sha AS commit_sha, m.rel_ci_halfwidth, run.run_id
FROM measurements m
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    JOIN runs run ON run.id = m.run_id
    LEFT JOIN commits c ON c.id = run.commit_id
WHERE m.unjudged AND m.history;
