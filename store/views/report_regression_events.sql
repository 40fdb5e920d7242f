CREATE VIEW report_regression_events AS
SELECT e.id AS event_id, e.regression_id, g.title, repo.name AS repository, e.at, e.actor,
    e.state, e.note
FROM regression_events e
    JOIN regressions g ON g.id = e.regression_id
    JOIN repositories repo ON repo.id = g.repository_id;
