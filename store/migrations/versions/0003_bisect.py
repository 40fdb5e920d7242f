"""Bisection steps: every A/B probe a bisection made, so a culprit can be audited and shown.

One bisection (``bisect_id``) walks a commit range on one device; each step times the probe
commit interleaved against the known-good commit for one case and records the verdict. The
regression it was started for (if any) gets the culprit in ``regressions.culprit_commit_id``;
the steps say how sure that is.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE bisect_steps (
    id              bigserial PRIMARY KEY,
    bisect_id       uuid NOT NULL,
    step            int NOT NULL,
    regression_id   bigint REFERENCES regressions(id) ON DELETE CASCADE,
    repository_id   int NOT NULL REFERENCES repositories(id),
    device_id       int REFERENCES devices(id),
    series_id       bigint REFERENCES series(id),
    good_commit_id  bigint NOT NULL REFERENCES commits(id),
    probe_commit_id bigint NOT NULL REFERENCES commits(id),
    verdict         text NOT NULL
                    CHECK (verdict IN ('SAME', 'FASTER', 'SLOWER', 'AMBIGUOUS', 'ERROR')),
    ratio           double precision,
    ci_low          double precision,
    ci_high         double precision,
    samples         int NOT NULL DEFAULT 0,
    gpu_seconds     double precision NOT NULL DEFAULT 0,
    note            text NOT NULL DEFAULT '',
    at              timestamptz NOT NULL DEFAULT now(),
    UNIQUE (bisect_id, step, series_id)
);
CREATE INDEX bisect_steps_regression_idx ON bisect_steps (regression_id, at);
CREATE INDEX bisect_steps_commit_idx ON bisect_steps (probe_commit_id);
GRANT SELECT ON bisect_steps TO {READER};"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE bisect_steps;")
