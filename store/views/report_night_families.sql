CREATE VIEW report_night_families AS
SELECT night, repository, family, device_model, method, sum(cases) AS cases,
    count(*) AS kernels,
    exp(sum(ln_speedup_sum) / NULLIF(sum(speedup_cases), 0)) AS speedup_geomean,
    sum(pct_sol_sum) / NULLIF(sum(sol_cases), 0) AS mean_pct_sol
FROM report_night_kernels
GROUP BY night, repository, family, device_model, method;
