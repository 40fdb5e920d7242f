"""Distributed measurements: a collective's nccl-tests bandwidth on each measurement, the
fabric (interconnect and NCCL tuning) on each series whose case ran on several ranks, which
``report_comm_bandwidth`` shows by message size and world size against the interconnect's
peak.

The world size is the case's ``gpus_per_node`` x ``nodes`` params, already in the series'
identity; the fabric joins it there (``kernelwatch.store.identity.series_key``). Every
rank's GPU UUID and the NCCL version stay in each measurement's ``extra``.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
ALTER TABLE measurements
    ADD COLUMN message_bytes bigint,
    ADD COLUMN algbw_gbps double precision,
    ADD COLUMN busbw_gbps double precision,
    ADD COLUMN busbw_peak_gbps double precision;
ALTER TABLE series ADD COLUMN fabric text;
"""
    )


def downgrade() -> None:
    op.execute(
        """
ALTER TABLE series DROP COLUMN fabric;
ALTER TABLE measurements DROP COLUMN message_bytes, DROP COLUMN algbw_gbps,
    DROP COLUMN busbw_gbps, DROP COLUMN busbw_peak_gbps;
"""
    )
