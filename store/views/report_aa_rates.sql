CREATE VIEW report_aa_rates AS
SELECT repo.name AS repository, r.pool,
    CASE WHEN r.device_model = '' THEN '(whole pool)' ELSE r.device_model END AS device_model,
    r.pairs, r.different, r.rate, r.stated, r.p_value, r.flagged, r.computed_at
FROM aa_rates r
    JOIN repositories repo ON repo.id = r.repository_id
WHERE r.computed_at = (
    SELECT max(latest.computed_at) FROM aa_rates latest
    WHERE latest.repository_id = r.repository_id
);
