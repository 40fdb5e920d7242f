"""Honest numbers on the dashboards and alerts (issue 21).

- ``report_regressed_kernels`` counts only regressions that are not ``false_positive`` or
  ``wont_fix``: a dismissed regression is not a kernel that regressed.
- ``report_bisect_steps`` gains ``probe_run_at``, when the probed commit was first measured by
  a nightly on the step's GPU model, so a verdict is marked on the history chart at the point
  it judged (a commit authored days before it merged is otherwise marked days early).
- ``report_latest_nightly_runs`` gains the run's ``status``, ``report_nightly_latest`` its
  ``run_status`` and ``report_nightly_kernels`` ``partial_runs``: a partial run is marked.
- ``report_pool_freshness``: hours since each pool's last nightly per repository and GPU
  model, so pipeline alerts can be limited to the configured pools.
- ``report_series_lengths``: history points per series, for the "too short to judge" count.
- ``report_night_comparison``: the morning-after view, per series the latest nightly against
  the nightly before it on the same GPU model (ratio of medians, with an interval from the
  two stored median CIs), with the same night's A/B verdict when the series was suspected.
- ``report_regression_worst_series``: per regression the series that moved most, where a
  link from the regression to a history goes; ``report_triage_links``: the triage board
  with those columns.
- ``report_quarter_points``: every history point with the case as one text
  (``kernel dtype case on GPU``), its place in the series (commit order), ours and the baseline
  library's medians, throughput and %SOL, for the several-cases history.
- ``pr_findings`` and ``report_pr_findings``: what a PR check concluded (each case's A/B
  verdict with ratio and CI, static findings, correctness failures) and where its comparison
  report is, for the PR dashboard (the verdicts are computed when the check runs, from the
  stored samples and that day's thresholds, and kept as they were reported).

Its views are defined in ``store/views/`` now; this revision keeps its tables.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

PR_FINDINGS = """
CREATE TABLE pr_findings (
    id           bigserial PRIMARY KEY,
    head_run_id  bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    base_run_id  bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('timing', 'static', 'correctness')),
    kernel       text NOT NULL,
    case_label   text NOT NULL,
    dtype        text NOT NULL,
    -- timing: the A/B verdict; static: the rule; correctness: the check's verdict
    verdict      text NOT NULL,
    ratio        double precision,
    ci_low       double precision,
    ci_high      double precision,
    p_value      double precision,
    detail       text NOT NULL DEFAULT '',
    report       text
);
CREATE INDEX pr_findings_head_idx ON pr_findings (head_run_id);"""


def upgrade() -> None:
    op.execute(PR_FINDINGS)


def downgrade() -> None:
    op.execute("DROP TABLE pr_findings;")
