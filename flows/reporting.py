"""What the flows hand to people: the report files, the notices about new regressions, and
the names of Prefect artifacts. The rendering itself lives in ``report/``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import psycopg

from kernelwatch.config.settings import Config, Notifications
from kernelwatch.dashboards import links
from kernelwatch.flows.notify import RegressionNotice, bisect_command
from kernelwatch.flows.tasks import store_connection
from kernelwatch.report.html import write_nightly_report
from kernelwatch.report.repro import repository_sources
from kernelwatch.store.report_queries import RunNotFound, repro_at
from kernelwatch.store.triage_state import show_regression


def nightly_report(config: Config, repository: str) -> Path | None:
    """Write the repository's nightly report (latest runs, open regressions) under the
    configured report folder and return its path; None while no nightly run is stored."""
    with store_connection() as conn:
        try:
            return write_nightly_report(
                conn, repository, Path(config.run.report_dir), sources=repository_sources(config)
            )
        except RunNotFound:
            return None


def regression_notices(
    ids: Sequence[int], report: Path | None, targets: Notifications
) -> list[RegressionNotice]:
    """A notice per regression, read back from the store after bisection had its say."""
    if not ids:
        return []
    with store_connection() as conn:
        return [notice(conn, regression_id, report, targets) for regression_id in ids]


def notice(
    conn: psycopg.Connection, regression_id: int, report: Path | None, targets: Notifications
) -> RegressionNotice:
    """The announcement of regression ``regression_id``: what moved, the culprit or the
    range, a link to the worst-moved series' history and the command to run next."""
    row = show_regression(conn, regression_id)
    magnitude = row.get("magnitude")
    worst = row["change_point_list"][0] if row["change_point_list"] else None
    panel_url = None
    if worst is not None and targets.grafana_url:
        values = {**worst, "repository": row["repository"]}
        panel_url = links.history_url(targets.grafana_url, values, worst["at"])
    return RegressionNotice(
        regression_id=regression_id,
        repository=row["repository"],
        kind=row["kind"],
        opened_by=row["opened_by"],
        title=row["title"],
        magnitude_pct=100 * magnitude if magnitude is not None else None,
        good=row.get("good_sha"),
        bad=row.get("bad_sha"),
        culprit=row.get("culprit_sha"),
        report=str(report) if report else None,
        panel_url=panel_url,
        command=_next_command(conn, row, worst),
    )


def _next_command(conn: psycopg.Connection, row: dict, worst: dict | None) -> str:
    """The culprit's repro command on the worst-moved series, else the bisection's."""
    if row.get("culprit_sha") and worst is not None:
        found = repro_at(conn, worst["series_key"], row["culprit_sha"])
        if found is not None:
            return found
    return bisect_command(row["regression_id"], row["repository"])


def report_url(report: Path, report_dir: Path, base_url: str) -> str | None:
    """``report``'s address under ``base_url``, where ``report_dir`` is served; None without
    a base URL or for a report outside that folder (a path on the worker is no link)."""
    if not base_url:
        return None
    try:
        relative = report.resolve().relative_to(report_dir.resolve())
    except ValueError:
        return None
    return f"{base_url.rstrip('/')}/{relative.as_posix()}"


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes only)."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
