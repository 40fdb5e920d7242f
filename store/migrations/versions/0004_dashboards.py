"""A stored case label on ``series``, which the dashboards' views (``store/views/``) show
and filter on.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# The case's parameters as a label ("batch: 0, hidden: 1024"), in jsonb's key order. Stored:
# turning jsonb into text costs ~1 us a row, 7 ms of a fleet-wide panel's 11 ms when computed
# per query.
CASE_LABEL = """ALTER TABLE series ADD COLUMN case_label text
    GENERATED ALWAYS AS (translate(params::text, '{}"', '')) STORED"""


def upgrade() -> None:
    op.execute(CASE_LABEL)


def downgrade() -> None:
    op.execute("ALTER TABLE series DROP COLUMN case_label;")
