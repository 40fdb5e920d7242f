-- One row per series, for template variables and joins.
CREATE VIEW report_series AS
SELECT s.id AS series_id, s.key AS series_key, repo.name AS repository, k.suite,
    k.name AS kernel, s.workload, s.params, s.case_label,
    s.dtype, s.device_model, s.timer, s.l2, s.harness_version,
    s.timer || '/' || s.l2 || '/h' || s.harness_version AS method, s.created_at
FROM series s
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id;
