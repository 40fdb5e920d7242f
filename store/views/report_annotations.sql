CREATE VIEW report_annotations AS
SELECT a.id AS annotation_id, a.at, a.kind, a.text, a.author, repo.name AS repository,
    s.key AS series_key, a.series_id, a.device_model, c.sha AS commit_sha
FROM annotations a
    LEFT JOIN repositories repo ON repo.id = a.repository_id
    LEFT JOIN series s ON s.id = a.series_id
    LEFT JOIN commits c ON c.id = a.commit_id;
