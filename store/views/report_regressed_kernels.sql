-- Per kernel and GPU model: regressions (grouped alerts) whose change points fall in [since,
-- until], with how many series moved and by how much at worst.
-- SECURITY DEFINER, as a view reads with its owner's rights: the reader role may SELECT
-- the report_* views only, not the tables this function reads.
CREATE FUNCTION report_regressed_kernels(since timestamptz, until timestamptz) RETURNS TABLE (
    repository text, kernel text, device_model text, regressions bigint, open_regressions
    bigint, series bigint, worst_change double precision, last_at timestamptz
) LANGUAGE sql STABLE SECURITY DEFINER SET search_path = public, pg_temp AS $fn$
SELECT repo.name, k.name, s.device_model, count(DISTINCT cp.regression_id),
    count(DISTINCT cp.regression_id) FILTER (WHERE g.state IN ('untriaged', 'acknowledged', 'investigating')),
    count(DISTINCT cp.series_id), max(cp.rel_change), max(cp.at)
FROM change_points cp
    JOIN regressions g ON g.id = cp.regression_id
    JOIN series s ON s.id = cp.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
WHERE cp.direction = 'regression' AND cp.at BETWEEN since AND until
    AND g.state NOT IN ('false_positive', 'wont_fix')
GROUP BY repo.name, k.name, s.device_model
$fn$;
