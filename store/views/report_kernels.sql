-- One row per kernel, for the kernel pickers' labels.
CREATE VIEW report_kernels AS
SELECT repo.name AS repository, k.suite, k.name AS kernel, k.family
FROM kernels k
    JOIN repositories repo ON repo.id = k.repository_id;
