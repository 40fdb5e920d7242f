-- Every nightly measurement of a collective: bus bandwidth by message size and world size.
CREATE VIEW report_comm_bandwidth AS
SELECT repo.name AS repository, k.suite, k.name AS kernel, s.dtype, s.device_model,
    s.fabric, s.case_label,
    (s.params->>'gpus_per_node')::int * coalesce((s.params->>'nodes')::int, 1) AS world_size,
    coalesce((s.params->>'nodes')::int, 1) AS nodes,
    r.started_at AS measured_at, m.message_bytes, m.median_ns, m.algbw_gbps, m.busbw_gbps,
    m.busbw_peak_gbps, 100 * m.busbw_gbps / NULLIF(m.busbw_peak_gbps, 0) AS pct_peak
FROM measurements m
    JOIN runs r ON r.id = m.run_id
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
WHERE m.busbw_gbps IS NOT NULL AND m.status = 'ok' AND r.trigger IN ('nightly', 'manual');
