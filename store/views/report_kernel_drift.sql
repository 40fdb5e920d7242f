-- Per repository, GPU model and kernel: the latest nightly run against the first nightly run at or
-- after ``since`` (the baseline), over the series both measured: the geometric mean and the worst
-- of the latest/baseline median ratios.
-- SECURITY DEFINER, as a view reads with its owner's rights: the reader role may SELECT
-- the report_* views only, not the tables this function reads.
CREATE FUNCTION report_kernel_drift(since timestamptz) RETURNS TABLE (
    repository text, device_model text, kernel text, series bigint, latest_at timestamptz,
    baseline_at timestamptz, ratio_geomean double precision, ratio_worst double precision
) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
WITH baseline AS (
    SELECT DISTINCT ON (repo.id, d.model) r.id AS run_pk, r.started_at
    FROM repositories repo
        CROSS JOIN devices d
        CROSS JOIN LATERAL (
            SELECT id, started_at FROM runs
            WHERE device_id = d.id AND repository_id = repo.id
                AND trigger IN ('nightly', 'manual') AND status IN ('ok', 'partial')
                AND started_at >= since
            ORDER BY started_at LIMIT 1
        ) r
    ORDER BY repo.id, d.model, r.started_at
), points AS (
    SELECT m.series_id, m.median_ns, b.started_at
    FROM baseline b JOIN measurements m ON m.run_id = b.run_pk
    WHERE m.status = 'ok' AND m.median_ns > 0
)
SELECT lp.repository, lp.device_model, lp.kernel, count(*), max(lp.night), max(b.started_at),
    exp(avg(ln(lp.median_ns / b.median_ns))), max(lp.median_ns / b.median_ns)
FROM latest_points lp JOIN points b ON b.series_id = lp.series_id
WHERE lp.run_pk IN (SELECT run_pk FROM report_latest_nightly_runs) AND lp.status = 'ok' AND lp.median_ns > 0
GROUP BY lp.repository, lp.device_model, lp.kernel
$fn$;
