CREATE VIEW report_build_history AS
SELECT b.id AS build_id, run.run_id, run.started_at AS at, run.trigger,
    repo.name AS repository, c.sha AS commit_sha, k.name AS kernel, b.function, b.language,
    b.arch, b.dtype, b.workload, b.case_label, cfg.label AS config, b.status, b.reason,
    b.registers, b.spill_store_bytes, b.spill_load_bytes,
    coalesce(b.spill_store_bytes, 0) + coalesce(b.spill_load_bytes, 0) AS spill_bytes,
    b.stack_bytes, b.shared_static_bytes, b.shared_dynamic_bytes, b.num_warps, b.num_stages,
    b.tensor_core, CASE b.tensor_core WHEN 'none' THEN 0 WHEN 'HMMA' THEN 1
        WHEN 'HGMMA' THEN 2 WHEN 'QGMMA' THEN 3 WHEN 'tcgen05' THEN 4 WHEN 'UTCQMMA' THEN 5
        WHEN 'UTCOMMA' THEN 6 END AS tensor_core_rank, b.tma_loads,
    b.global_load_bits, b.local_loads, b.local_stores, b.instructions, b.cubin_sha256
FROM build_metrics b
    JOIN runs run ON run.id = b.run_id
    JOIN kernels k ON k.id = b.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
    LEFT JOIN commits c ON c.id = run.commit_id
    LEFT JOIN configs cfg ON cfg.id = b.config_id;
