"""A change point may be a drift (issue 47): a sustained slope the detector reports as one
change at the first night that moved (``analysis/drift.py``). ``drift_slope`` is its
relative change per night, ``drift_end_measurement_id`` the first measurement at the level
it reached, ``drift_open`` whether it was still drifting at the newest night when last
judged (a later pass closes it at the night it stopped). NULL on a step.

Revision ID: 0025
Revises: 0024
"""

from __future__ import annotations

from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
ALTER TABLE change_points
    ADD COLUMN drift_slope double precision,
    ADD COLUMN drift_end_measurement_id bigint,
    ADD COLUMN drift_open boolean,
    ADD CONSTRAINT change_points_drift_check CHECK (
        (drift_slope IS NULL) = (drift_open IS NULL)
        AND (drift_slope IS NULL) = (drift_end_measurement_id IS NULL)
    );"""
    )


def downgrade() -> None:
    op.execute(
        """
ALTER TABLE change_points
    DROP CONSTRAINT change_points_drift_check,
    DROP COLUMN drift_open,
    DROP COLUMN drift_end_measurement_id,
    DROP COLUMN drift_slope;"""
    )
