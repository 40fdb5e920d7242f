CREATE VIEW report_runs AS
SELECT run.run_id, run.trigger, repo.name AS repository, run.suite, c.sha AS commit_sha,
    run.base_sha, run.pool, d.model AS device_model, d.host, d.uuid AS device_uuid,
    run.status, run.started_at, run.finished_at, run.measurements, run.measurement_errors,
    run.samples, run.throttled_samples, run.mean_rel_ci, run.correctness,
    run.correctness_failed, run.builds
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
    LEFT JOIN commits c ON c.id = run.commit_id;
