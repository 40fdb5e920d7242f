"""The A/B rule's false-alarm rate, measured (issue 49): ``aa_pairs`` keeps every A/A pair a
nightly detection pass judged (two consecutive nightly measurements of a series with the
same build identity, on one pool: the later one, the earlier one, the verdict), and
``aa_rates`` the rate per pool and GPU model each pass computed from them, with the rule's
stated rate and whether the pool was flagged.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE aa_pairs (
    measurement_id  bigint PRIMARY KEY REFERENCES measurements(id) ON DELETE CASCADE,
    before_id       bigint NOT NULL REFERENCES measurements(id) ON DELETE CASCADE,
    series_id       bigint NOT NULL REFERENCES series(id) ON DELETE CASCADE,
    pool            text NOT NULL,
    device_model    text NOT NULL,
    verdict         text NOT NULL CHECK (verdict IN ('SAME', 'FASTER', 'SLOWER', 'AMBIGUOUS')),
    ratio           double precision NOT NULL,
    p_value         double precision NOT NULL,
    measured_at     timestamptz NOT NULL
);
CREATE INDEX aa_pairs_pool_idx ON aa_pairs (pool, measured_at);
CREATE TABLE aa_rates (
    repository_id   integer NOT NULL REFERENCES repositories(id) ON DELETE CASCADE,
    computed_at     timestamptz NOT NULL,
    pool            text NOT NULL,
    -- '' for the whole pool
    device_model    text NOT NULL,
    pairs           integer NOT NULL,
    different       integer NOT NULL,
    rate            double precision NOT NULL,
    stated          double precision NOT NULL,
    p_value         double precision NOT NULL,
    flagged         boolean NOT NULL,
    PRIMARY KEY (repository_id, computed_at, pool, device_model)
);"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE aa_rates; DROP TABLE aa_pairs;")
