"""The morning-after view says what the nightly decided (issue 30).

``report_night_comparison`` is made again. Per series, the latest nightly is still put
against the nightly before it on the same GPU model, but that ratio of two medians is only
context (``night_ratio``): consecutive nights may run on different GPUs of the model and
several commits may land between them, and an interval built from the two runs' own CIs
excluded 1 on a quarter of the cases of a night that changed nothing. What moved is what
the nightly decided. Each row carries:

- ``decided``, the same night's outcome for the series (``regression``, ``improvement``,
  ``unconfirmed``, ``waiting``, ``checked_noise``), or ``not suspected``, with
  ``decided_rank`` to order by;
- that decision's evidence: the suspicion, and the A/B's own numbers (verdict, ratio, CI,
  p-value) over its own range (``ab_base_sha`` .. ``ab_head_sha``), which is not the
  previous nightly's commit when several commits landed;
- the regression's stored ``magnitude``, the one number the other panels show for it;
- what makes the comparison doubtful: ``behind_newest_h``, hours between this GPU model's
  latest nightly and the repository's newest (a pool whose nightly stopped is not last
  night), ``failed_between`` and ``failed_after``, nightly runs that failed between the two
  nights or after the latest, and ``same_gpu``, whether both nights ran on one device.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
HISTORY_TRIGGERS = "('nightly', 'manual')"
MEASURED = "('ok', 'partial')"
#: The order a morning reads the outcomes in: what was confirmed, then what is still open,
#: then what an A/B cleared, then the rest.
DECIDED_RANK = """CASE ns.outcome WHEN 'regression' THEN 0 WHEN 'improvement' THEN 1
        WHEN 'unconfirmed' THEN 2 WHEN 'waiting' THEN 2 WHEN 'checked_noise' THEN 3
        ELSE 4 END"""

NIGHT_COMPARISON = f"""
WITH latest AS (
    SELECT l.*, r.device_id
    FROM report_latest_nightly_runs l JOIN runs r ON r.id = l.run_pk
), previous AS (
    SELECT DISTINCT ON (l.repository_id, l.device_model) l.run_pk AS latest_pk,
        r.id AS run_pk, r.commit_id, r.started_at, r.device_id
    FROM latest l
        JOIN devices d ON d.model = l.device_model
        CROSS JOIN LATERAL (
            SELECT id, started_at, commit_id, device_id FROM runs
            WHERE device_id = d.id AND repository_id = l.repository_id
                AND trigger IN {HISTORY_TRIGGERS} AND status IN {MEASURED}
                AND started_at < l.started_at
            ORDER BY started_at DESC LIMIT 1
        ) r
    ORDER BY l.repository_id, l.device_model, r.started_at DESC
), newest AS (
    SELECT repository_id, max(started_at) AS newest_at FROM latest GROUP BY repository_id
), failed AS (
    SELECT l.run_pk AS latest_pk,
        count(*) FILTER (WHERE f.started_at > p.started_at AND f.started_at < l.started_at)
            AS failed_between,
        count(*) FILTER (WHERE f.started_at > l.started_at) AS failed_after
    FROM latest l
        JOIN previous p ON p.latest_pk = l.run_pk
        JOIN devices d ON d.model = l.device_model
        JOIN runs f ON f.device_id = d.id AND f.repository_id = l.repository_id
            AND f.trigger IN {HISTORY_TRIGGERS} AND f.status NOT IN {MEASURED}
            AND f.started_at > p.started_at
    GROUP BY l.run_pk
)
SELECT rs.series_key, rs.repository, rs.kernel, rs.dtype, rs.case_label, rs.device_model,
    rs.method, l.run_id, l.started_at AS night, l.status AS run_status, lc.sha AS commit_sha,
    p.started_at AS previous_night, pc.sha AS previous_sha, pm.median_ns AS previous_ns,
    m.median_ns AS latest_ns, m.median_ns / pm.median_ns AS night_ratio,
    coalesce(ns.outcome, 'not suspected') AS decided, {DECIDED_RANK} AS decided_rank,
    ns.suspicion, ns.verdict AS ab_verdict, ab_base.sha AS ab_base_sha,
    ab_head.sha AS ab_head_sha, ns.ratio AS ab_ratio, ns.ci_low AS ab_ci_low,
    ns.ci_high AS ab_ci_high, ns.p_value AS ab_p_value, ns.regression_id, g.magnitude,
    extract(epoch FROM n.newest_at - l.started_at) / 3600 AS behind_newest_h,
    coalesce(f.failed_between, 0) AS failed_between, coalesce(f.failed_after, 0) AS failed_after,
    p.device_id = l.device_id AS same_gpu
FROM latest l
    JOIN previous p ON p.latest_pk = l.run_pk
    JOIN newest n ON n.repository_id = l.repository_id
    LEFT JOIN failed f ON f.latest_pk = l.run_pk
    JOIN measurements m ON m.run_id = l.run_pk AND m.status = 'ok' AND m.median_ns > 0
    JOIN measurements pm ON pm.run_id = p.run_pk AND pm.series_id = m.series_id
        AND pm.status = 'ok' AND pm.median_ns > 0
    JOIN report_series rs ON rs.series_id = m.series_id
    LEFT JOIN commits lc ON lc.id = l.commit_id
    LEFT JOIN commits pc ON pc.id = p.commit_id
    LEFT JOIN LATERAL (
        SELECT outcome, suspicion, verdict, ratio, ci_low, ci_high, p_value, regression_id,
            base_commit_id, head_commit_id
        FROM night_suspects
        WHERE run_id = l.run_pk AND series_id = m.series_id ORDER BY id DESC LIMIT 1
    ) ns ON true
    LEFT JOIN commits ab_base ON ab_base.id = ns.base_commit_id
    LEFT JOIN commits ab_head ON ab_head.id = ns.head_commit_id
    LEFT JOIN regressions g ON g.id = ns.regression_id"""


def _replace(body: str) -> None:
    op.execute("DROP VIEW report_night_comparison;")
    op.execute(f"CREATE VIEW report_night_comparison AS {body};")
    op.execute(f"GRANT SELECT ON report_night_comparison TO {READER};")


def upgrade() -> None:
    _replace(NIGHT_COMPARISON)


def downgrade() -> None:
    versions = "kernelwatch.store.migrations.versions"
    earlier = importlib.import_module(f"{versions}.0009_honest_dashboards")
    _replace(earlier.NEW_VIEWS["report_night_comparison"])
