"""What the flows hand to people: the report files, the notices about new regressions, and
the names of Prefect artifacts. The rendering itself lives in ``report/``."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from kernelwatch.config.settings import Config
from kernelwatch.flows.notify import RegressionNotice
from kernelwatch.flows.tasks import store_connection
from kernelwatch.report.html import write_nightly_report
from kernelwatch.report.repro import repository_sources
from kernelwatch.store.report_queries import RunNotFound
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


def regression_notices(ids: Sequence[int], report: Path | None) -> list[RegressionNotice]:
    """A notice per regression, read back from the store after bisection had its say."""
    if not ids:
        return []
    notices = []
    with store_connection() as conn:
        for regression_id in ids:
            row = show_regression(conn, regression_id)
            magnitude = row.get("magnitude")
            notices.append(
                RegressionNotice(
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
                )
            )
    return notices


def artifact_key(*parts: str) -> str:
    """A Prefect artifact key (lowercase letters, digits and dashes only)."""
    return re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
