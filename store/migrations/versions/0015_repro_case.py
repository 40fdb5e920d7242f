"""The repro command names its case (issue 30).

``report_regression_repro`` again, the same columns: the command gains a ``--param KEY=VALUE``
for each parameter of the case (by name), so it measures that one case again, not every case of its
kernel, workload and dtype. A timing regression's case is its series' (the one that moved
most); a correctness finding's is its night's case label. A static finding is a build of a
kernel and dtype, so its command stays pinned to those.

A view's change only: the view is defined in ``store/views/`` now, so this revision changes
nothing.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to do: the view is ``store/views/report_regression_repro.sql``."""


def downgrade() -> None:
    """Nothing to undo."""
