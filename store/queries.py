"""Named queries over the reporting views: what dashboards, alerts, reports and PR comments
read. Each returns a list of dicts (one per row, keyed by column). The SQL is the same a
Grafana panel would hold, so the views, not the panels, own it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

LATEST = """
SELECT * FROM report_latest
WHERE (%(repository)s::text IS NULL OR repository = %(repository)s)
  AND (%(device_model)s::text IS NULL OR device_model = %(device_model)s)
  AND (%(kernel)s::text IS NULL OR kernel = %(kernel)s)
  AND (%(dtype)s::text IS NULL OR dtype = %(dtype)s)
ORDER BY kernel, dtype, series_key"""

SERIES_HISTORY = """
SELECT * FROM report_series_history
WHERE series_key = %(series_key)s AND measured_at >= %(since)s
ORDER BY measured_at"""

OPEN_REGRESSIONS = """
SELECT * FROM report_open_regressions
WHERE (%(repository)s::text IS NULL OR repository = %(repository)s)
ORDER BY created_at DESC"""

REGRESSIONS = """
SELECT * FROM report_regressions
WHERE created_at >= %(since)s
  AND (%(repository)s::text IS NULL OR repository = %(repository)s)
ORDER BY created_at DESC"""

DEVICE_NOISE = """
SELECT device_id, model, uuid, host, sum(runs) AS runs, sum(measurements) AS measurements,
    sum(measurement_errors) AS measurement_errors, sum(samples) AS samples,
    sum(throttled_samples) AS throttled_samples,
    sum(throttled_samples)::float8 / NULLIF(sum(samples), 0) AS throttled_fraction,
    sum(mean_rel_ci * runs) / NULLIF(sum(runs), 0) AS mean_rel_ci
FROM report_device_noise
WHERE day >= date_trunc('day', %(since)s::timestamptz)
  AND (%(device_model)s::text IS NULL OR model = %(device_model)s)
GROUP BY device_id, model, uuid, host
ORDER BY model, host, uuid"""

RUN_COMPARISON = """
SELECT * FROM report_run_comparison WHERE run_id = %(run_id)s ORDER BY kernel, series_key"""

ANNOTATIONS = """
SELECT * FROM report_annotations
WHERE at >= %(since)s AND (%(series_key)s::text IS NULL OR series_key = %(series_key)s)
ORDER BY at"""


def latest(
    conn: psycopg.Connection,
    *,
    repository: str | None = None,
    device_model: str | None = None,
    kernel: str | None = None,
    dtype: str | None = None,
) -> list[dict[str, Any]]:
    """The latest value of every series matching the filters (None matches all)."""
    return _rows(conn, LATEST, repository=repository, device_model=device_model,
                 kernel=kernel, dtype=dtype)  # fmt: skip


def series_history(
    conn: psycopg.Connection, series_key: str, *, since: datetime
) -> list[dict[str, Any]]:
    """One series' history since ``since``, oldest first, with change points marked."""
    return _rows(conn, SERIES_HISTORY, series_key=series_key, since=since)


def open_regressions(
    conn: psycopg.Connection, *, repository: str | None = None
) -> list[dict[str, Any]]:
    """Regressions still untriaged, acknowledged or under investigation, newest first."""
    return _rows(conn, OPEN_REGRESSIONS, repository=repository)


def regressions(
    conn: psycopg.Connection, *, since: datetime, repository: str | None = None
) -> list[dict[str, Any]]:
    """Every regression opened since ``since``, in any state: "what regressed this year"."""
    return _rows(conn, REGRESSIONS, since=since, repository=repository)


def device_noise(
    conn: psycopg.Connection, *, since: datetime, device_model: str | None = None
) -> list[dict[str, Any]]:
    """Per device since ``since``: runs, errors, throttled fraction and the mean of the
    harness's relative CI half-widths."""
    return _rows(conn, DEVICE_NOISE, since=since, device_model=device_model)


def run_comparison(conn: psycopg.Connection, run_id: str) -> list[dict[str, Any]]:
    """Each measurement of one run (a PR or bisect run) beside its series' latest value."""
    return _rows(conn, RUN_COMPARISON, run_id=run_id)


def annotations(
    conn: psycopg.Connection, *, since: datetime, series_key: str | None = None
) -> list[dict[str, Any]]:
    """Annotations (baseline resets, method changes, notes) since ``since``."""
    return _rows(conn, ANNOTATIONS, since=since, series_key=series_key)


def _rows(conn: psycopg.Connection, sql: str, **params: Any) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()
