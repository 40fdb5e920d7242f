"""Device seconds per run and stage (issue 49): ``device_time`` keeps, for each run, the
wall seconds each of its stages held the device by the parent's clock (``StageTime``):
the check, the timing, the same night's or a PR check's A/B, a bisection's probe. A stage
run for a stored run later (the same night's confirmation A/B of tonight's run) is a row of
its own, added when it ends. Per case, each record keeps its own ``duration_s`` (the
``report_case_device_seconds`` view). The reader reads them through the views
(``report_device_time``), as every base table.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE device_time (
    id          bigserial PRIMARY KEY,
    run_id      bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    stage       text NOT NULL CHECK (stage IN ('check', 'bench', 'ab', 'bisect', 'selfcheck')),
    device_s    double precision NOT NULL CHECK (device_s >= 0),
    cases       integer NOT NULL DEFAULT 0 CHECK (cases >= 0),
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX device_time_run_idx ON device_time (run_id);"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE device_time;")
