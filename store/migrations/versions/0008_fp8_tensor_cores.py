"""FP8 tensor-core classes ranked apart in ``report_build_history.tensor_core_rank``
(``QGMMA``, fp8 wgmma, above ``HGMMA``; ``UTCQMMA``, fp8 tcgen05, above ``tcgen05``), so the
builds dashboard shows an FP8 GEMM losing its fp8 path as the step down it is. A view's
change only: the view is defined in ``store/views/`` now, so this revision changes nothing.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to do: the rank lives in ``store/views/report_build_history.sql``."""


def downgrade() -> None:
    """Nothing to undo."""
