"""Marks on a series' time axis shared by the kernel history and the several-cases history:
its change points, and the bisection verdicts of its regressions at the nightly point where
each probed commit first ran."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as sdk

from kernelwatch.dashboards import common


def change_points(series: str) -> sdk.AnnotationQuery:
    """Change points of the series ``series`` (an SQL condition on ``series_key``) picks; a
    drift's text gives its slope and where it stopped, and its tags say ``drift``."""
    return common.sql_annotation(
        "Change points",
        f"""
SELECT at AS "time", summary AS text, 'change point,' || direction || ',' || kind AS tags
FROM report_change_points
WHERE {series} AND $__timeFilter(at)
""",
        "red",
    )


def bisection_verdicts(series: str) -> sdk.AnnotationQuery:
    """Bisection verdicts on those series or their regressions, at the nightly point of the
    probed commit (its author time only when no nightly measured it)."""
    return common.sql_annotation(
        "Bisection verdicts",
        f"""
SELECT coalesce(probe_run_at, probe_time, at) AS "time", summary AS text,
  'bisect,' || verdict AS tags
FROM report_bisect_steps
WHERE ({series} OR regression_id IN (
    SELECT regression_id FROM report_change_points WHERE {series}))
  AND coalesce(probe_run_at, probe_time, at) BETWEEN $__timeFrom() AND $__timeTo()
""",
        "purple",
    )
