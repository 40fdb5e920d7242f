-- Every history point with the command that measures that commit again the same way.
CREATE VIEW report_history_points AS
SELECT h.*,
    CASE WHEN h.commit_sha IS NOT NULL THEN format(
        'git worktree add /tmp/kw-%1$s %2$s && kernelwatch bench --repo /tmp/kw-%1$s'
        ' --suite %3$s -k %4$s --workload %5$s --dtype %6$s --timer %7$s --l2 %8$s',
        left(h.commit_sha, 12), h.commit_sha, h.suite, h.kernel, h.workload, h.dtype,
        split_part(h.method, '/', 1), split_part(h.method, '/', 2)) END AS repro
FROM report_series_history h;
