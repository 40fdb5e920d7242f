-- Per device over [since, until]: runs, failures, throttling and noise, and whether the device is
-- quarantined: more than 5% of its samples ran throttled, its mean relative CI is more than 2x its
-- GPU model's median, or at least half of its runs failed (its schedulers should skip it).
-- SECURITY DEFINER, as a view reads with its owner's rights: the reader role may SELECT
-- the report_* views only, not the tables this function reads.
CREATE FUNCTION report_device_health(since timestamptz, until timestamptz) RETURNS TABLE (
    device_model text, host text, device_uuid text, runs bigint, failed_runs bigint,
    partial_runs bigint, samples numeric, throttled_samples numeric, throttled_fraction double
    precision, mean_rel_ci double precision, model_median_rel_ci double precision, last_run_at
    timestamptz, quarantined boolean, reason text
) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
WITH per_device AS (
    SELECT d.model, d.host, d.uuid, count(*) AS runs,
        count(*) FILTER (WHERE run.status = 'failed') AS failed_runs,
        count(*) FILTER (WHERE run.status = 'partial') AS partial_runs,
        sum(run.samples) AS samples, sum(run.throttled_samples) AS throttled_samples,
        sum(run.throttled_samples)::float8 / NULLIF(sum(run.samples), 0) AS throttled_fraction,
        avg(run.mean_rel_ci) AS mean_rel_ci, max(run.started_at) AS last_run_at
    FROM runs run JOIN devices d ON d.id = run.device_id
    WHERE run.started_at BETWEEN since AND until
    GROUP BY d.id, d.model, d.host, d.uuid
), per_model AS (
    SELECT model, percentile_cont(0.5) WITHIN GROUP (ORDER BY mean_rel_ci) AS median_rel_ci
    FROM per_device GROUP BY model
), judged AS (
    SELECT p.*, m.median_rel_ci,
        concat_ws('; ',
            CASE WHEN p.throttled_fraction > 0.05
                THEN format('%s%% of samples throttled',
                    round((100 * p.throttled_fraction)::numeric, 1)) END,
            CASE WHEN p.mean_rel_ci > 2.0 * m.median_rel_ci
                THEN format('noise %sx the %s median',
                    round((p.mean_rel_ci / m.median_rel_ci)::numeric, 1), p.model) END,
            CASE WHEN 2 * p.failed_runs >= p.runs
                THEN format('%s of %s runs failed', p.failed_runs, p.runs) END) AS reason
    FROM per_device p JOIN per_model m ON m.model = p.model
)
SELECT model, host, uuid, runs, failed_runs, partial_runs, samples, throttled_samples,
    throttled_fraction, mean_rel_ci, median_rel_ci, last_run_at, reason <> '', reason
FROM judged
$fn$;
