CREATE VIEW report_open_regressions AS
SELECT * FROM report_regressions WHERE open;
