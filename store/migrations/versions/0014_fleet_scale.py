"""The dashboards fast on a year of fleet history (issue 30).

- ``series_points``: the history points of each series counted up to 100, at ingest
  (``kernelwatch.store.night_stats``) and here for the points stored before;
  ``report_series_lengths`` reads it instead of counting 2.3 million measurements per call
  (the "series too short to judge" count took 1.4 s at fleet scale), so its ``points`` stop
  at 100.
- ``measurements_comm_idx``: the few measurements with a bus bandwidth (collectives), so the
  communication dashboard finds them without scanning every measurement.
- ``report_bisect_steps.probe_run_at`` is read from ``runs`` alone: the first history run of
  the probed commit on the step's GPU model; for a commit no nightly measured (one of
  several merged on one night), the first history run after both its author time and the
  step's good commit's first run, which is the nightly it first ran in. It used to scan the
  measurements of those runs, and to fall back on the author time, days before the night.
- ``report_night_comparison`` again, the same rows: the commits, the suspects and their
  regressions joined once per night instead of once per series (130 ms to 60 ms at fleet
  scale).
- ``report_regression_repro``: per regression the command that measures it again, head
  against base on one GPU with its kernel, workload and dtype pinned:
  ``kernelwatch pr-check --base <culprit's parent> --head <culprit>`` (before a bisection
  named one, the regression's good and bad commits), the kernel, workload and dtype of its
  series that moved most, or of its night's finding when it has no series.

Its views are defined in ``store/views/`` now; this revision keeps its tables.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
-- Narrow, with room on each page: a young series' count is updated in place (HOT).
CREATE TABLE series_points (
    series_id  int PRIMARY KEY REFERENCES series(id) ON DELETE CASCADE,
    points     int NOT NULL CHECK (points BETWEEN 0 AND 100)
) WITH (fillfactor = 50);
INSERT INTO series_points
SELECT series_id, least(count(*), 100) FROM measurements WHERE history GROUP BY series_id;
CREATE INDEX measurements_comm_idx ON measurements (series_id)
    WHERE busbw_gbps IS NOT NULL;"""
    )


def downgrade() -> None:
    op.execute("DROP INDEX measurements_comm_idx;")
    op.execute("DROP TABLE series_points;")
