"""FP8 tensor-core classes ranked apart: ``report_build_history.tensor_core_rank`` follows
``kernelwatch.harness.build.sass.TENSOR_CORE_RANK`` again, which now ranks ``QGMMA`` (fp8
wgmma) above ``HGMMA`` and adds ``UTCQMMA`` (fp8 tcgen05) above ``tcgen05``, so the builds
dashboard shows an FP8 GEMM losing its fp8 path as the step down it is.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_PREVIOUS = importlib.import_module("kernelwatch.store.migrations.versions.0004_dashboards")
_VIEW = "report_build_history"

# kernelwatch.harness.build.sass.TENSOR_CORE_RANK, frozen here as this revision's SQL.
_TENSOR_CORE_RANK = """CASE b.tensor_core WHEN 'none' THEN 0 WHEN 'HMMA' THEN 1
        WHEN 'HGMMA' THEN 2 WHEN 'QGMMA' THEN 3 WHEN 'tcgen05' THEN 4 WHEN 'UTCQMMA' THEN 5 END"""


def _view(rank: str) -> str:
    body = _PREVIOUS.VIEWS[_VIEW]
    if _PREVIOUS._TENSOR_CORE_RANK not in body:
        raise RuntimeError(f"revision 0004's {_VIEW} no longer holds its tensor-core rank")
    # Same columns in the same order, so the views built on this one stay valid.
    return f"CREATE OR REPLACE VIEW {_VIEW} AS " + body.replace(_PREVIOUS._TENSOR_CORE_RANK, rank)


def upgrade() -> None:
    op.execute(_view(_TENSOR_CORE_RANK))


def downgrade() -> None:
    op.execute(_view(_PREVIOUS._TENSOR_CORE_RANK))
