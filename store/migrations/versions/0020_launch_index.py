"""A build's launch position (issue 48, item 1): ``build_metrics.launch_index`` is the
position of the build's launch in its case's launch sequence (an autotuner's candidates are
one launch), so a case that launches one function twice, as fused MoE does its two grouped
GEMMs, stores a build for each and the static diff compares each with its own counterpart.
Builds stored before it are their case's first launch (0).

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE build_metrics ADD COLUMN launch_index int NOT NULL DEFAULT 0;")


def downgrade() -> None:
    op.execute("ALTER TABLE build_metrics DROP COLUMN launch_index;")
