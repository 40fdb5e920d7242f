CREATE VIEW report_regression_repro AS
SELECT g.id AS regression_id, repo.name AS repository,
    coalesce(culprit.sha, bad.sha) AS head_sha,
    coalesce(culprit.parents[1], good.sha) AS base_sha,
    coalesce(w.kernel, ns.kernel) AS kernel, w.workload, coalesce(w.dtype, ns.dtype) AS dtype,
    'kernelwatch pr-check --repository ' || CASE WHEN repo.name ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN repo.name ELSE '''' || replace(repo.name, '''', '''\''''') || '''' END
        || ' --base ' || coalesce(culprit.parents[1], good.sha)
        || ' --head ' || coalesce(culprit.sha, bad.sha)
        || coalesce(' --kernel ' || CASE WHEN coalesce(w.kernel, ns.kernel) ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN coalesce(w.kernel, ns.kernel) ELSE '''' || replace(coalesce(w.kernel, ns.kernel), '''', '''\''''') || '''' END, '')
        || coalesce(' --workload ' || CASE WHEN w.workload ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN w.workload ELSE '''' || replace(w.workload, '''', '''\''''') || '''' END, '')
        || coalesce(' --dtype ' || CASE WHEN coalesce(w.dtype, ns.dtype) ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN coalesce(w.dtype, ns.dtype) ELSE '''' || replace(coalesce(w.dtype, ns.dtype), '''', '''\''''') || '''' END, '')
        || coalesce(CASE
    WHEN w.kernel IS NOT NULL THEN
        (SELECT string_agg(' --param ' || CASE WHEN p.key || '=' || p.value ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN p.key || '=' || p.value ELSE '''' || replace(p.key || '=' || p.value, '''', '''\''''') || '''' END, '' ORDER BY p.key)
         FROM jsonb_each_text(w.params) p)
    WHEN ns.kind = 'correctness' THEN
        (SELECT string_agg(' --param ' || CASE WHEN p.pin ~ '^[A-Za-z0-9_.,:/@=+-]+$' THEN p.pin ELSE '''' || replace(p.pin, '''', '''\''''') || '''' END, '' ORDER BY p.n)
         FROM regexp_split_to_table(ns.case_label, ' (?=[^ =]+=)') WITH ORDINALITY p(pin, n)
         WHERE p.pin LIKE '%=%')
    END, '') AS repro
FROM regressions g
    JOIN repositories repo ON repo.id = g.repository_id
    LEFT JOIN commits culprit ON culprit.id = g.culprit_commit_id
    LEFT JOIN commits good ON good.id = g.good_commit_id
    LEFT JOIN commits bad ON bad.id = g.bad_commit_id
    LEFT JOIN LATERAL (
        SELECT k.name AS kernel, s.workload, s.dtype, s.params
        FROM change_points cp JOIN series s ON s.id = cp.series_id
            JOIN kernels k ON k.id = s.kernel_id
        WHERE cp.regression_id = g.id ORDER BY abs(cp.rel_change) DESC, s.key LIMIT 1
    ) w ON true
    LEFT JOIN LATERAL (
        SELECT k.name AS kernel, n.dtype, n.kind, n.case_label FROM night_suspects n
            JOIN kernels k ON k.id = n.kernel_id
        WHERE n.regression_id = g.id ORDER BY n.id LIMIT 1
    ) ns ON w.kernel IS NULL
WHERE coalesce(culprit.sha, bad.sha) IS NOT NULL
    AND coalesce(culprit.parents[1], good.sha) IS NOT NULL;
