-- The latest nightly (or manual) run that measured (ok or partial) per repository and GPU model: a
-- few backward steps of an index on runs per device and repository.
CREATE VIEW report_latest_nightly_runs AS
SELECT DISTINCT ON (repo.id, d.model) repo.id AS repository_id, repo.name AS repository,
    d.model AS device_model, r.id AS run_pk, r.run_id, r.started_at, r.commit_id, r.status
FROM repositories repo
    CROSS JOIN devices d
    CROSS JOIN LATERAL (
        SELECT id, run_id, started_at, commit_id, status FROM runs
        WHERE device_id = d.id AND repository_id = repo.id AND trigger IN ('nightly', 'manual')
            AND status IN ('ok', 'partial')
        ORDER BY started_at DESC LIMIT 1
    ) r
ORDER BY repo.id, d.model, r.started_at DESC, r.id DESC;
