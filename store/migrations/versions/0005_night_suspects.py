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
- Views: ``report_night_suspects`` (the morning-after view), and ``report_regressions``,
  ``report_open_regressions`` and ``report_triage_board`` again with ``kind`` and
  ``opened_by``; the triage board's kernels come from the regression's change points and its
  suspects, so correctness and static regressions (which have no change point) show theirs.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
OPEN_STATES = "('untriaged', 'acknowledged', 'investigating')"
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

REGRESSIONS = f"""
SELECT g.id AS regression_id, repo.name AS repository, g.title, g.state,
    g.state IN {OPEN_STATES} AS open, g.cause, g.magnitude,
    good.sha AS good_sha, bad.sha AS bad_sha, culprit.sha AS culprit_sha,
    g.assignee, g.bug_url, g.notes, g.created_at, g.updated_at, g.resolved_at,
    (SELECT count(*) FROM change_points cp WHERE cp.regression_id = g.id) AS change_points,
    g.kind, g.opened_by
FROM regressions g
    JOIN repositories repo ON repo.id = g.repository_id
    LEFT JOIN commits good ON good.id = g.good_commit_id
    LEFT JOIN commits bad ON bad.id = g.bad_commit_id
    LEFT JOIN commits culprit ON culprit.id = g.culprit_commit_id"""

TRIAGE_BOARD = """
SELECT g.*, extract(epoch FROM now() - g.created_at) / 86400 AS age_days,
    members.kernels, members.device_models, cps.worst_change, ev.at AS last_event_at,
    ev.actor AS last_actor, ev.note AS last_note, coalesce(bis.steps, 0) AS bisect_steps,
    bis.last_verdict, bis.gpu_seconds AS bisect_gpu_seconds
FROM report_regressions g
    LEFT JOIN LATERAL (
        SELECT max(cp.rel_change) AS worst_change
        FROM change_points cp WHERE cp.regression_id = g.regression_id
    ) cps ON true
    LEFT JOIN LATERAL (
        SELECT string_agg(DISTINCT m.kernel, ', ') AS kernels,
            string_agg(DISTINCT m.device_model, ', ') AS device_models
        FROM (
            SELECT k.name AS kernel, s.device_model
            FROM change_points cp
                JOIN series s ON s.id = cp.series_id
                JOIN kernels k ON k.id = s.kernel_id
            WHERE cp.regression_id = g.regression_id
            UNION ALL
            SELECT k.name, d.model
            FROM night_suspects ns
                JOIN kernels k ON k.id = ns.kernel_id
                JOIN runs r ON r.id = ns.run_id
                JOIN devices d ON d.id = r.device_id
            WHERE ns.regression_id = g.regression_id
        ) m
    ) members ON true
    LEFT JOIN LATERAL (
        SELECT at, actor, note FROM regression_events
        WHERE regression_id = g.regression_id ORDER BY at DESC, id DESC LIMIT 1
    ) ev ON true
    LEFT JOIN LATERAL (
        SELECT count(*) AS steps, sum(gpu_seconds) AS gpu_seconds,
            (array_agg(verdict ORDER BY at DESC, step DESC))[1] AS last_verdict
        FROM bisect_steps WHERE regression_id = g.regression_id
    ) bis ON true"""

# The morning-after view: every suspect of every nightly run, with the run's night, the
# series it is a point of (and when that point was measured, to place it on the history
# chart), the commit range it was checked over and what it became.
NIGHT_SUSPECTS = """
SELECT ns.id AS suspect_id, ns.at, r.run_id, r.started_at AS night, repo.name AS repository,
    ns.kind, k.name AS kernel, ns.case_label, ns.dtype, d.model AS device_model,
    s.key AS series_key, ns.measurement_id, m.measured_at AS point_at, base.sha AS base_sha,
    head.sha AS head_sha,
    ns.severity, ns.suspicion, ns.verdict, ns.ratio, ns.ci_low, ns.ci_high, ns.p_value,
    ns.samples, ns.rounds, ns.gpu_seconds, ns.outcome, ns.regression_id, ns.note,
    format('%s %s: %s%s', ns.kind, ns.outcome, ns.suspicion,
        ', A/B ' || ns.verdict || ' ' || round(ns.ratio::numeric, 3) || ' ['
            || round(ns.ci_low::numeric, 3) || ', ' || round(ns.ci_high::numeric, 3) || ']')
        AS summary
FROM night_suspects ns
    JOIN runs r ON r.id = ns.run_id
    JOIN repositories repo ON repo.id = ns.repository_id
    JOIN kernels k ON k.id = ns.kernel_id
    JOIN devices d ON d.id = r.device_id
    JOIN commits head ON head.id = ns.head_commit_id
    LEFT JOIN commits base ON base.id = ns.base_commit_id
    LEFT JOIN series s ON s.id = ns.series_id
    LEFT JOIN measurements m ON m.id = ns.measurement_id"""

# Dropped and made again, in this order (each reads the one before it).
VIEWS = {
    "report_regressions": REGRESSIONS,
    "report_open_regressions": "SELECT * FROM report_regressions WHERE open",
    "report_triage_board": TRIAGE_BOARD,
}
# Views that read those and are made again unchanged (their SQL lives in its migration).
DEPENDENT = ("report_triage_summary",)


def _earlier(module: str) -> dict[str, str]:
    # The migrations that defined a view first, for the definitions downgrade puts back.
    return importlib.import_module(f"kernelwatch.store.migrations.versions.{module}").VIEWS


def _recreate(definitions: dict[str, str]) -> None:
    for name in (*reversed(DEPENDENT), *reversed(VIEWS)):
        op.execute(f"DROP VIEW {name};")
    earlier = {**_earlier("0002_reporting"), **_earlier("0004_dashboards")}
    for name in (*VIEWS, *DEPENDENT):
        op.execute(f"CREATE VIEW {name} AS {definitions.get(name, earlier[name])};")
    op.execute(f"GRANT SELECT ON {', '.join((*VIEWS, *DEPENDENT))} TO {READER};")


def upgrade() -> None:
    op.execute(TABLES)
    _recreate(VIEWS)
    op.execute(f"CREATE VIEW report_night_suspects AS {NIGHT_SUSPECTS};")
    op.execute(f"GRANT SELECT ON report_night_suspects TO {READER};")


def downgrade() -> None:
    op.execute("DROP VIEW report_night_suspects;")
    _recreate({})
    op.execute(
        f"""
DROP TABLE night_suspects;
ALTER TABLE bisect_steps DROP CONSTRAINT bisect_steps_verdict_check;
ALTER TABLE bisect_steps ADD CONSTRAINT bisect_steps_verdict_check
    CHECK (verdict IN ({AB_VERDICTS}));
ALTER TABLE regressions DROP COLUMN opened_by, DROP COLUMN kind;"""
    )
