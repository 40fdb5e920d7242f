-- Each series' point in the latest nightly run per repository and GPU model
-- (report_latest_nightly_runs), read from latest_points, with its series' descriptors.
CREATE VIEW report_nightly_latest AS
SELECT series_key, repository, suite, kernel, workload, case_label, dtype, device_model,
    method, run_id, night AS measured_at, commit_sha, status, median_ns, ci_low_ns,
    ci_high_ns, rel_ci_halfwidth, tflops, gbps, pct_compute, pct_memory, pct_sol, bound,
    baseline, baseline_median_ns, speedup, config, run_status
FROM latest_points
WHERE run_pk IN (SELECT run_pk FROM report_latest_nightly_runs);
