-- Device seconds per case and stage (issue 49): each case's own time in its child, as its
-- record keeps it: a check's, a timing's (the A/B sides of a PR check, a bisection's probes),
-- and each suspect the same night's A/B measured. A stage's time in report_device_time also
-- holds what no case owns (the children's start, imports, compiles).
CREATE VIEW report_case_device_seconds AS
SELECT r.run_id, repo.name AS repository, r.pool, r.trigger,
    CASE r.trigger WHEN 'bisect' THEN 'bisect' ELSE 'check' END AS stage,
    k.name AS kernel, cr.case_key, cr.dtype, cr.duration_s AS device_s
FROM correctness_results cr
    JOIN runs r ON r.id = cr.run_id
    JOIN repositories repo ON repo.id = r.repository_id
    JOIN kernels k ON k.id = cr.kernel_id
UNION ALL
SELECT r.run_id, repo.name, r.pool, r.trigger,
    CASE r.trigger WHEN 'pr' THEN 'ab' WHEN 'bisect' THEN 'bisect' ELSE 'bench' END,
    k.name, s.case_key, s.dtype, m.duration_s
FROM measurements m
    JOIN runs r ON r.id = m.run_id
    JOIN repositories repo ON repo.id = r.repository_id
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
UNION ALL
SELECT r.run_id, repo.name, r.pool, r.trigger, 'ab', k.name, ns.case_label, ns.dtype,
    ns.gpu_seconds
FROM night_suspects ns
    JOIN runs r ON r.id = ns.run_id
    JOIN repositories repo ON repo.id = r.repository_id
    JOIN kernels k ON k.id = ns.kernel_id
WHERE ns.rounds > 0;
