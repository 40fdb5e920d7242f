-- The cases the several-cases history offers, with the same text.
CREATE VIEW report_quarter_cases AS
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.device_model, rs.method,
    rs.kernel || ' ' || rs.dtype || ' ' || rs.case_label || ' on ' || rs.device_model AS case_text
FROM report_series rs;
