-- report_regressions with what a triager needs on one line: what moved where, the last triage
-- event, and how far bisection got.
CREATE VIEW report_triage_board AS
SELECT g.*, extract(epoch FROM now() - g.created_at) / 86400 AS age_days,
    members.kernels, members.device_models, cps.worst_change, ev.at AS last_event_at,
    ev.actor AS last_actor, ev.note AS last_note, coalesce(bis.steps, 0) AS bisect_steps,
    bis.last_verdict, bis.gpu_seconds AS bisect_gpu_seconds
FROM report_regressions g
    LEFT JOIN LATERAL (
        SELECT max(cp.rel_change) AS worst_change
        FROM change_points cp WHERE cp.regression_id = g.regression_id
    ) cps ON true
    LEFT JOIN LATERAL (
        SELECT string_agg(DISTINCT m.kernel, ', ') AS kernels,
            string_agg(DISTINCT m.device_model, ', ') AS device_models
        FROM (
            SELECT k.name AS kernel, s.device_model
            FROM change_points cp
                JOIN series s ON s.id = cp.series_id
                JOIN kernels k ON k.id = s.kernel_id
            WHERE cp.regression_id = g.regression_id
            UNION ALL
            SELECT k.name, d.model
            FROM night_suspects ns
                JOIN kernels k ON k.id = ns.kernel_id
                JOIN runs r ON r.id = ns.run_id
                JOIN devices d ON d.id = r.device_id
            WHERE ns.regression_id = g.regression_id
        ) m
    ) members ON true
    LEFT JOIN LATERAL (
        SELECT at, actor, note FROM regression_events
        WHERE regression_id = g.regression_id ORDER BY at DESC, id DESC LIMIT 1
    ) ev ON true
    LEFT JOIN LATERAL (
        SELECT count(*) AS steps, sum(gpu_seconds) AS gpu_seconds,
            (array_agg(verdict ORDER BY at DESC, step DESC))[1] AS last_verdict
        FROM bisect_steps WHERE regression_id = g.regression_id
    ) bis ON true;
