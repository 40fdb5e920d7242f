"""Next-morning alerts: what the nightly suspected and how it confirmed it the same night, and
regressions of three kinds.

- ``regressions.kind``: ``timing`` (slower, by change points or by a same-night A/B),
  ``correctness`` (a case that passed in the previous nightly fails tonight) or ``static``
  (a build regressed against the previous nightly head's); ``regressions.opened_by``:
  ``change_point`` (the history net) or ``confirmation`` (the same night).
- ``night_suspects``: one row per suspect of a nightly run: the signal (kind, why), the commit
  range it was checked over (the previous nightly head or the last night before a suspected
  tail, and tonight's head), the A/B verdict with its ratio and interval, the rounds and
  device seconds it took, and the outcome: ``regression``, ``improvement``,
  ``checked_noise`` (A/B SAME: shown on the history chart, no alert), ``waiting`` (still
  AMBIGUOUS, or unmeasurable: left to history) or ``unconfirmed`` (over the night's budget).
  Correctness and static suspects are deterministic and need no A/B.
- ``bisect_steps.verdict`` gains ``PASS`` and ``FAIL``: a correctness regression is bisected
  with the correctness check as the probe.
- ``report_night_suspects`` (``store/views/``) is the morning-after view of them.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

KINDS = "('timing', 'correctness', 'static')"
AB_VERDICTS = "'SAME', 'FASTER', 'SLOWER', 'AMBIGUOUS', 'ERROR'"

TABLES = f"""
ALTER TABLE regressions
    ADD COLUMN kind text NOT NULL DEFAULT 'timing' CHECK (kind IN {KINDS}),
    ADD COLUMN opened_by text NOT NULL DEFAULT 'change_point'
        CHECK (opened_by IN ('change_point', 'confirmation'));

ALTER TABLE bisect_steps DROP CONSTRAINT bisect_steps_verdict_check;
ALTER TABLE bisect_steps ADD CONSTRAINT bisect_steps_verdict_check
    CHECK (verdict IN ({AB_VERDICTS}, 'PASS', 'FAIL'));

CREATE TABLE night_suspects (
    id              bigserial PRIMARY KEY,
    run_id          bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    repository_id   int NOT NULL REFERENCES repositories(id),
    kind            text NOT NULL CHECK (kind IN {KINDS}),
    kernel_id       int NOT NULL REFERENCES kernels(id),
    -- timing: the series and tonight's point of it
    series_id       int REFERENCES series(id),
    measurement_id  bigint,
    -- the case (timing, correctness) or the build (static: function, arch, case)
    case_label      text NOT NULL,
    dtype           text NOT NULL,
    base_commit_id  bigint REFERENCES commits(id),
    head_commit_id  bigint NOT NULL REFERENCES commits(id),
    -- timing: |log(tonight / the regime's median)|, what orders the confirmations; null otherwise
    severity        double precision,
    suspicion       text NOT NULL,
    verdict         text CHECK (verdict IN ({AB_VERDICTS})),
    ratio           double precision,
    ci_low          double precision,
    ci_high         double precision,
    p_value         double precision,
    samples         int NOT NULL DEFAULT 0,
    rounds          int NOT NULL DEFAULT 0,
    gpu_seconds     double precision NOT NULL DEFAULT 0,
    outcome         text NOT NULL CHECK (outcome IN
                        ('regression', 'improvement', 'checked_noise', 'waiting', 'unconfirmed')),
    regression_id   bigint REFERENCES regressions(id) ON DELETE SET NULL,
    note            text NOT NULL DEFAULT '',
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX night_suspects_run_idx ON night_suspects (run_id);
CREATE INDEX night_suspects_series_idx ON night_suspects (series_id, measurement_id);
CREATE INDEX night_suspects_regression_idx ON night_suspects (regression_id);
"""


def upgrade() -> None:
    op.execute(TABLES)


def downgrade() -> None:
    op.execute(
        f"""
DROP TABLE night_suspects;
ALTER TABLE bisect_steps DROP CONSTRAINT bisect_steps_verdict_check;
ALTER TABLE bisect_steps ADD CONSTRAINT bisect_steps_verdict_check
    CHECK (verdict IN ({AB_VERDICTS}));
ALTER TABLE regressions DROP COLUMN opened_by, DROP COLUMN kind;"""
    )
