CREATE VIEW report_night_kernels AS
SELECT n.night, repo.name AS repository, k.name AS kernel,
    CASE WHEN k.family <> '' THEN k.family ELSE k.name END AS family, d.model AS device_model,
    n.method, n.cases, n.speedup_cases, n.ln_speedup_sum, n.sol_cases, n.pct_sol_sum,
    exp(n.ln_speedup_sum / NULLIF(n.speedup_cases, 0)) AS speedup_geomean,
    n.pct_sol_sum / NULLIF(n.sol_cases, 0) AS mean_pct_sol
FROM night_kernel_stats n
    JOIN kernels k ON k.id = n.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    JOIN runs r ON r.id = n.run_id
    JOIN devices d ON d.id = r.device_id;
