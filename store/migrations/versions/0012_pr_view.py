"""The PR dashboard a reviewer can use (issue 30).

- ``pr_checks``: one row per PR check on one GPU (its head run): the pull request's number,
  branch and author (from the workflow's payload or ``pr-check --pr``), the merge verdict
  the comment gave (``outcome`` 0/1/2 and its words) and the report's URL. The URL is
  null where no ``[run] report_url`` serves the report folder: a path on a worker is not
  a link.
- ``pr_findings`` gains the base and head medians of a timed case, and a static finding's
  arch, function and values before and after.
- ``report_pr_findings`` shows those columns and the check's; ``report_pr_checks`` lists the
  checks per pull request, one row per GPU (both in ``store/views/``).

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

PR_CHECKS = """
CREATE TABLE pr_checks (
    head_run_id  bigint PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    base_run_id  bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    pr_number    int CHECK (pr_number > 0),
    branch       text NOT NULL DEFAULT '',
    author       text NOT NULL DEFAULT '',
    outcome      smallint NOT NULL CHECK (outcome IN (0, 1, 2)),
    verdict      text NOT NULL,
    report       text
);
CREATE INDEX pr_checks_number_idx ON pr_checks (pr_number);
ALTER TABLE pr_findings
    ADD COLUMN base_ns double precision,
    ADD COLUMN head_ns double precision,
    ADD COLUMN arch text NOT NULL DEFAULT '',
    ADD COLUMN function text NOT NULL DEFAULT '',
    ADD COLUMN before_value text NOT NULL DEFAULT '',
    ADD COLUMN after_value text NOT NULL DEFAULT '';"""


def upgrade() -> None:
    op.execute(PR_CHECKS)
    # Checks stored before this revision: their verdict as the findings give it, and the
    # report only where it was already a URL.
    op.execute(
        """
INSERT INTO pr_checks (head_run_id, base_run_id, outcome, verdict, report)
SELECT head_run_id, min(base_run_id),
    CASE WHEN bool_or(kind IN ('static', 'correctness') OR verdict = 'SLOWER') THEN 1 ELSE 0 END,
    CASE WHEN bool_or(kind IN ('static', 'correctness') OR verdict = 'SLOWER')
        THEN 'regression' ELSE 'no regression' END,
    CASE WHEN min(report) ~ '^https?://' THEN min(report) END
FROM pr_findings GROUP BY head_run_id"""
    )
    op.execute("ALTER TABLE pr_findings DROP COLUMN report;")


def downgrade() -> None:
    op.execute(
        """
ALTER TABLE pr_findings ADD COLUMN report text;
UPDATE pr_findings f SET report = pc.report FROM pr_checks pc
WHERE pc.head_run_id = f.head_run_id;
ALTER TABLE pr_findings DROP COLUMN base_ns, DROP COLUMN head_ns, DROP COLUMN arch,
    DROP COLUMN function, DROP COLUMN before_value, DROP COLUMN after_value;
DROP TABLE pr_checks;"""
    )
