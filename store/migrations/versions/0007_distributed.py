"""Distributed measurements: a collective's nccl-tests bandwidth on each measurement, the
fabric (interconnect and NCCL tuning) on each series whose case ran on several ranks, and
the view the communication panel reads (bus bandwidth by message size and world size,
against the interconnect's peak).

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

READER = "kernelwatch_reader"
HISTORY_TRIGGERS = "('nightly', 'manual')"


def upgrade() -> None:
    op.execute(
        f"""
ALTER TABLE measurements
    ADD COLUMN message_bytes bigint,
    ADD COLUMN algbw_gbps double precision,
    ADD COLUMN busbw_gbps double precision,
    ADD COLUMN busbw_peak_gbps double precision;
ALTER TABLE series ADD COLUMN fabric text;

-- Every nightly measurement of a collective: bus bandwidth by message size and world size.
CREATE VIEW report_comm_bandwidth AS
SELECT repo.name AS repository, k.suite, k.name AS kernel, s.dtype, s.device_model,
    s.fabric, s.case_label,
    (s.params->>'gpus_per_node')::int * coalesce((s.params->>'nodes')::int, 1) AS world_size,
    coalesce((s.params->>'nodes')::int, 1) AS nodes,
    r.started_at AS measured_at, m.message_bytes, m.median_ns, m.algbw_gbps, m.busbw_gbps,
    m.busbw_peak_gbps, 100 * m.busbw_gbps / NULLIF(m.busbw_peak_gbps, 0) AS pct_peak
FROM measurements m
    JOIN runs r ON r.id = m.run_id
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    JOIN repositories repo ON repo.id = k.repository_id
WHERE m.busbw_gbps IS NOT NULL AND m.status = 'ok' AND r.trigger IN {HISTORY_TRIGGERS};
GRANT SELECT ON report_comm_bandwidth TO {READER};
"""
    )


def downgrade() -> None:
    op.execute(
        """
DROP VIEW report_comm_bandwidth;
ALTER TABLE series DROP COLUMN fabric;
ALTER TABLE measurements DROP COLUMN message_bytes, DROP COLUMN algbw_gbps,
    DROP COLUMN busbw_gbps, DROP COLUMN busbw_peak_gbps;
"""
    )
