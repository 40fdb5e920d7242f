"""A nightly point may be unjudged (issue 47): its CI half-width stayed wider than the margin
it would be judged by after it was measured again, so it could not have shown a change that
size. Stored as such (``measurements.unjudged``), shown on the history panel and kept out of
the level later nights are compared with (``store/series_history.py``).

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Rare by design: a partial index finds them for the fleet's count without a scan.
    op.execute(
        """
ALTER TABLE measurements ADD COLUMN unjudged boolean NOT NULL DEFAULT false;
CREATE INDEX measurements_unjudged_idx ON measurements (measured_at) WHERE unjudged;"""
    )


def downgrade() -> None:
    op.execute(
        """
DROP INDEX measurements_unjudged_idx;
ALTER TABLE measurements DROP COLUMN unjudged;"""
    )
