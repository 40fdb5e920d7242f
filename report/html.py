"""Writing the HTML reports: one self-contained file each (CSS, SVG charts and the small
script for sorting and filtering tables are inlined; nothing is fetched), for one run, for
the latest nightly runs of a repository, or for a comparison of two runs.

Each writer reads the store, builds the page (``views``), renders it with Jinja2 and returns
the path of the file it wrote in ``out_dir``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any

import psycopg
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from kernelwatch.report import format as fmt
from kernelwatch.report.compare import Comparison
from kernelwatch.report.markdown import pr_comment
from kernelwatch.report.repro import Source
from kernelwatch.report.views import (
    CHARTS_PER_REGRESSION,
    RegressionView,
    case_lines,
    ratio_svg,
    regression_view,
    run_view,
)
from kernelwatch.store.report_queries import (
    RunNotFound,
    bisect_steps,
    latest_runs,
    open_regressions,
    regressions_of_run,
    run_builds,
    run_correctness,
    run_header,
    run_measurements,
    series_history,
)
from kernelwatch.store.suspects import run_suspects
from kernelwatch.store.triage_state import show_regression

#: History shown before a regression's earliest change point.
HISTORY_BEFORE = timedelta(days=120)


def write_run_report(
    conn: psycopg.Connection,
    run_id: str,
    out_dir: Path,
    *,
    sources: Mapping[str, Source] | None = None,
) -> Path:
    """The report of one stored run: measurements with speed of light and repro commands,
    correctness, builds, the open regressions its series are part of, provenance.
    ``sources`` (by repository name) make the repro commands exact."""
    header = run_header(conn, run_id)
    view = run_view(
        header,
        run_measurements(conn, header.run_id),
        run_correctness(conn, header.run_id),
        sources or {},
    )
    page = _render(
        "run.html.j2",
        title=f"kernelwatch run {fmt.sha(header.commit_sha)} on {header.device.name}",
        run=view,
        builds=run_builds(conn, header.run_id),
        regressions=_regressions(conn, regressions_of_run(conn, header.run_id)),
    )
    return _write(out_dir, f"run-{header.run_id}.html", page)


def write_nightly_report(
    conn: psycopg.Connection,
    repository: str,
    out_dir: Path,
    *,
    sources: Mapping[str, Source] | None = None,
) -> Path:
    """The nightly report of a repository: its latest nightly run on each device with what
    that night suspected and how each suspect was confirmed (or left unconfirmed), and every
    open regression with its worst series' history (change point and bisection culprit
    marked). :class:`RunNotFound` when no nightly run of the repository is stored."""
    headers = latest_runs(conn, repository, "nightly")
    if not headers:
        raise RunNotFound(f"no nightly run of repository {repository!r} is stored")
    runs = [
        run_view(
            h, run_measurements(conn, h.run_id), run_correctness(conn, h.run_id), sources or {}
        )
        for h in headers
    ]
    open_ids = [row["regression_id"] for row in open_regressions(conn, repository=repository)]
    page = _render(
        "nightly.html.j2",
        title=f"kernelwatch nightly: {repository}",
        repository=repository,
        runs=runs,
        suspects={h.run_id: run_suspects(conn, h.run_id) for h in headers},
        regressions=_regressions(conn, open_ids),
    )
    return _write(out_dir, f"nightly-{_slug(repository)}.html", page)


def write_compare_report(
    conn: psycopg.Connection,
    comparison: Comparison,
    out_dir: Path,
    *,
    sources: Mapping[str, Source] | None = None,
) -> Path:
    """The report of head against base (a PR check, ``report.compare``): the verdict, each
    case's ratio with its CI, static regressions, correctness at head, speed of light,
    provenance and repro commands."""
    chart, left_off = ratio_svg(comparison)
    head = comparison.head
    head_measurements = [*(c.head for c in comparison.cases), *comparison.only_head]
    page = _render(
        "compare.html.j2",
        title=f"kernelwatch: {fmt.sha(comparison.base.commit_sha)} → {fmt.sha(head.commit_sha)}",
        c=comparison,
        lines=case_lines(comparison, sources or {}),
        ratio_svg=chart,
        ratio_left_off=left_off,
        head_run=run_view(
            head, head_measurements, run_correctness(conn, head.run_id), sources or {}
        ),
        comment=pr_comment(comparison),
    )
    name = f"compare-{fmt.sha(comparison.base.commit_sha)}-{fmt.sha(head.commit_sha)}.html"
    return _write(out_dir, name, page)


def _regressions(conn: psycopg.Connection, ids: Sequence[int]) -> list[RegressionView]:
    views = []
    for regression_id in ids:
        detail = show_regression(conn, regression_id)
        members = detail["change_point_list"]
        since = min((m["at"] for m in members), default=datetime.now(UTC)) - HISTORY_BEFORE
        histories = {
            m["series_key"]: series_history(conn, m["series_key"], since=since)
            for m in members[:CHARTS_PER_REGRESSION]
        }
        views.append(regression_view(detail, histories, bisect_steps(conn, regression_id)))
    return views


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("kernelwatch.report", "templates"),
        autoescape=select_autoescape(["j2"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        duration=fmt.duration,
        ratio=fmt.ratio,
        change=fmt.change,
        interval=fmt.interval,
        percent=fmt.percent,
        number=fmt.number,
        sha=fmt.sha,
        when=fmt.when,
        svg=_svg,
    )
    return env


def _render(template: str, **context: Any) -> str:
    static = resources.files("kernelwatch.report") / "static"
    return (
        _environment()
        .get_template(template)
        .render(
            css=Markup(static.joinpath("report.css").read_text()),
            script=Markup(static.joinpath("report.js").read_text()),
            generated=fmt.when(datetime.now(UTC)),
            **context,
        )
    )


def _svg(text: str | None) -> Markup | None:
    # The charts module escapes every text it puts in the SVG.
    return Markup(text) if text is not None else None


def _write(out_dir: Path, name: str, page: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / name
    partial = path.with_name(f".{name}.partial")
    partial.write_text(page)
    partial.replace(path)
    return path


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in text).strip("-") or "repo"
