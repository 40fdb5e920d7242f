"""A PR check may end inconclusive (issue 48): ``pr_checks.outcome`` 3, no case slower but a
case still AMBIGUOUS after the extra samples ``[pr]`` allows, which reads as no verdict,
never as 0.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
ALTER TABLE pr_checks DROP CONSTRAINT pr_checks_outcome_check,
    ADD CONSTRAINT pr_checks_outcome_check CHECK (outcome IN (0, 1, 2, 3));"""
    )


def downgrade() -> None:
    # Before this revision an inconclusive check had no outcome of its own: 2 (no verdict)
    # is the one that does not read as a pass.
    op.execute(
        """
UPDATE pr_checks SET outcome = 2 WHERE outcome = 3;
ALTER TABLE pr_checks DROP CONSTRAINT pr_checks_outcome_check,
    ADD CONSTRAINT pr_checks_outcome_check CHECK (outcome IN (0, 1, 2));"""
    )
