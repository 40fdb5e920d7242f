-- probe_time places a verdict at its commit on a history chart; at is when it ran.
CREATE VIEW report_bisect_steps AS
SELECT b.id AS step_id, b.bisect_id, b.step, b.at, probe.author_time AS probe_time,
    b.regression_id, repo.name AS repository, s.key AS series_key, d.model AS device_model,
    d.host, d.uuid AS device_uuid, good.sha AS good_sha, probe.sha AS probe_sha, b.verdict,
    b.ratio, b.ci_low, b.ci_high, b.samples, b.gpu_seconds, b.note,
    format('bisect step %s: %s at %s against %s%s', b.step, b.verdict, left(probe.sha, 12),
        left(good.sha, 12),
        ', ratio ' || round(b.ratio::numeric, 3) || ' [' || round(b.ci_low::numeric, 3)
            || ', ' || round(b.ci_high::numeric, 3) || ']') AS summary,
    coalesce(
        (SELECT min(r.started_at) FROM runs r
         WHERE r.commit_id = b.probe_commit_id AND r.repository_id = b.repository_id
            AND r.trigger IN ('nightly', 'manual') AND r.status IN ('ok', 'partial') AND (d.model IS NULL OR EXISTS (
    SELECT 1 FROM devices rd WHERE rd.id = r.device_id AND rd.model = d.model))),
        (SELECT min(r.started_at) FROM runs r
         WHERE r.repository_id = b.repository_id AND r.trigger IN ('nightly', 'manual') AND r.status IN ('ok', 'partial') AND (d.model IS NULL OR EXISTS (
    SELECT 1 FROM devices rd WHERE rd.id = r.device_id AND rd.model = d.model))
            AND r.started_at >= probe.author_time
            AND r.started_at > coalesce((SELECT min(g.started_at) FROM runs g
                WHERE g.commit_id = b.good_commit_id AND g.trigger IN ('nightly', 'manual')),
                '-infinity'))) AS probe_run_at
FROM bisect_steps b
    JOIN repositories repo ON repo.id = b.repository_id
    JOIN commits good ON good.id = b.good_commit_id
    JOIN commits probe ON probe.id = b.probe_commit_id
    LEFT JOIN devices d ON d.id = b.device_id
    LEFT JOIN series s ON s.id = b.series_id;
