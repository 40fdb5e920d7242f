-- Per repository, GPU model and kernel, over the latest nightly run: the mean %SOL and the
-- geometric mean of speedups over the stock library.
CREATE VIEW report_nightly_kernels AS
SELECT l.repository, l.device_model, k.name AS kernel, sum(n.cases) AS series,
    max(l.started_at) AS latest_at,
    sum(n.pct_sol_sum) / NULLIF(sum(n.sol_cases), 0) AS mean_pct_sol,
    exp(sum(n.ln_speedup_sum) / NULLIF(sum(n.speedup_cases), 0)) AS speedup_geomean,
    count(DISTINCT l.run_pk) FILTER (WHERE l.status = 'partial') AS partial_runs
FROM report_latest_nightly_runs l
    JOIN night_kernel_stats n ON n.run_id = l.run_pk
    JOIN kernels k ON k.id = n.kernel_id
GROUP BY l.repository, l.device_model, k.name;
