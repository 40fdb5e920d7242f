CREATE VIEW report_night_suspects AS
SELECT ns.id AS suspect_id, ns.at, r.run_id, r.started_at AS night, repo.name AS repository,
    ns.kind, k.name AS kernel, ns.case_label, ns.dtype, d.model AS device_model,
    s.key AS series_key, ns.measurement_id, m.measured_at AS point_at, base.sha AS base_sha,
    head.sha AS head_sha,
    ns.severity, ns.suspicion, ns.verdict, ns.ratio, ns.ci_low, ns.ci_high, ns.p_value,
    ns.samples, ns.rounds, ns.gpu_seconds, ns.outcome, ns.regression_id, ns.note,
    format('%s %s: %s%s', ns.kind, ns.outcome, ns.suspicion,
        ', A/B ' || ns.verdict || ' ' || round(ns.ratio::numeric, 3) || ' ['
            || round(ns.ci_low::numeric, 3) || ', ' || round(ns.ci_high::numeric, 3) || ']')
        AS summary
FROM night_suspects ns
    JOIN runs r ON r.id = ns.run_id
    JOIN repositories repo ON repo.id = ns.repository_id
    JOIN kernels k ON k.id = ns.kernel_id
    JOIN devices d ON d.id = r.device_id
    JOIN commits head ON head.id = ns.head_commit_id
    LEFT JOIN commits base ON base.id = ns.base_commit_id
    LEFT JOIN series s ON s.id = ns.series_id
    LEFT JOIN measurements m ON m.id = ns.measurement_id;
