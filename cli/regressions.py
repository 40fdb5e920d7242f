"""``kernelwatch regressions``: list, inspect and triage the regressions detection raised."""

from __future__ import annotations

import getpass
import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console

from kernelwatch.analysis.triage_rules import ALLOWED, CLOSED, STATE_FILTERS, TriageError
from kernelwatch.cli.arguments import JsonOption
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.connection import open_store
from kernelwatch.cli.console import TextTable, fail, output_console, stderr

if TYPE_CHECKING:
    from kernelwatch.config.settings import Notifications
    from kernelwatch.store.triage_state import Moved

_T = TypeVar("_T")

regressions_app = typer.Typer(
    no_args_is_help=False,
    invoke_without_command=True,
    help="Regressions: list, show and triage them (ack, resolve, reset-baseline).",
)

Actor = Annotated[
    str | None, typer.Option("--by", help="Who is acting (default: $USER).", show_default=False)
]
Note = Annotated[str, typer.Option(help="A note kept in the regression's history.")]


@regressions_app.callback()
def _default(ctx: typer.Context) -> None:
    """Regressions: list, show and triage them (ack, resolve, reset-baseline)."""
    if ctx.invoked_subcommand is None:
        list_command(state="open", repository=None, json_out=False)


@regressions_app.command(name="list")
def list_command(
    state: Annotated[
        str, typer.Option(help=f"A triage state, or one of {', '.join(STATE_FILTERS)}.")
    ] = "open",
    repository: Annotated[str | None, typer.Option(help="Only this repository.")] = None,
    json_out: JsonOption = False,
) -> None:
    """Regressions in a state (default: open), newest first."""
    if state not in STATE_FILTERS and state not in ALLOWED:
        fail(f"unknown state {state!r}; use one of {[*STATE_FILTERS, *ALLOWED]}", code=2)
    from kernelwatch.store.triage_state import list_regressions

    with open_store() as conn:
        rows = list_regressions(conn, state, repository)
    if json_out:
        for row in rows:
            typer.echo(json.dumps(row, default=str, sort_keys=True))
        return
    table = TextTable(title=f"regressions ({state})")
    for column in ("id", "repository", "title", "state", "cause", "range", "series", "assignee"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            str(row["regression_id"]),
            row["repository"] or "",
            row["title"],
            row["state"],
            row["cause"],
            f"{_short(row['good_sha'])}..{_short(row['bad_sha'])}",
            str(row["change_points"]) if row["kind"] != "serving" else "serving",
            row["assignee"] or "",
        )
    _out().print(table)


@regressions_app.command()
def update(
    repository: Annotated[str, typer.Option(help="The repository whose history to scan.")],
) -> None:
    """Run change-point detection over a repository's stored history: store new change
    points, open one regression per culprit range, close those whose series recovered. The
    thresholds are kernelwatch.toml's ([detection], per-kernel [[thresholds]])."""
    from kernelwatch.flows.detection import detect_and_alert
    from kernelwatch.store.report_queries import repositories
    from kernelwatch.store.series_history import repository_id

    config = configuration()
    with open_store(config.database) as conn:
        if repository_id(conn, repository) is None:
            known = repositories(conn)
            fail(
                f"no repository {repository!r} in the store; stored: {', '.join(known) or 'none'}",
                2,
            )
        report = detect_and_alert(conn, repository, config.thresholds)
    typer.echo(
        f"detection: {report.series} series ({report.too_short} too short to judge), "
        f"{report.change_points} new change point(s), {len(report.opened)} regression(s) "
        f"opened, {len(report.closed)} closed as recovered"
    )
    for regression_id in report.opened:
        typer.echo(f"opened #{regression_id}")
    for regression_id in report.closed:
        typer.echo(f"closed #{regression_id} (recovered)")


@regressions_app.command()
def show(regression_id: int, json_out: JsonOption = False) -> None:
    """One regression: the series it groups, how much each moved, and its triage history."""
    from kernelwatch.store.triage_state import show_regression

    with open_store() as conn:
        detail = _guard(lambda: show_regression(conn, regression_id))
    if json_out:
        typer.echo(json.dumps(detail, default=str, sort_keys=True))
        return
    out = _out()
    out.print(
        f"#{detail['regression_id']} {detail['title']} [{detail['state']}] "
        f"cause={detail['cause']} range={_short(detail['good_sha'])}..{_short(detail['bad_sha'])}"
        + (f" culprit={_short(detail['culprit_sha'])}" if detail["culprit_sha"] else ""),
        markup=False,
        highlight=False,
    )
    table = TextTable(title="change points")
    for column in ("kernel", "case", "dtype", "device", "change", "commit"):
        table.add_column(column, overflow="fold")
    for cp in detail["change_point_list"]:
        table.add_row(
            cp["kernel"],
            " ".join(f"{k}={v}" for k, v in cp["params"].items()),
            cp["dtype"],
            cp["device_model"],
            f"{100 * cp['rel_change']:+.1f}%",
            _short(cp["commit_sha"]),
        )
    if detail["change_point_list"]:
        out.print(table)
    if detail["serving_change_list"]:
        out.print(_serving_table(detail["serving_change_list"]))
    for event in detail["events"]:
        out.print(
            f"{event['at']:%Y-%m-%d %H:%M} {event['actor']}: {event['state']} {event['note']}",
            markup=False,
            highlight=False,
        )


def _serving_table(rows: list[dict[str, Any]]) -> TextTable:
    table = TextTable(title="serving metrics that moved")
    for column in ("deployment", "metric", "change", "run", "kernel", "was"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row["deployment"],
            row["metric"] + (" (provisional)" if row["provisional"] else ""),
            f"{100 * row['rel_change']:+.1f}%",
            f"{row['started_at']:%Y-%m-%d %H:%M}",
            _short(row["kernel_commit"]),
            _short(row["previous_kernel_commit"]),
        )
    explained = [row["explanation"] for row in rows if row["explanation"]]
    if explained:
        table.caption = "; ".join(explained)
    return table


@regressions_app.command()
def ack(
    regression_id: int,
    note: Note = "",
    assignee: Annotated[str | None, typer.Option(help="Who will look into it.")] = None,
    bug: Annotated[str | None, typer.Option(help="A bug tracker link.")] = None,
    by: Actor = None,
) -> None:
    """Acknowledge a regression (someone owns it now)."""
    _move(regression_id, "acknowledged", note, by, assignee=assignee, bug=bug)


@regressions_app.command()
def resolve(
    regression_id: int,
    as_: Annotated[
        str, typer.Option("--as", help=f"How it ended: one of {', '.join(sorted(CLOSED))}.")
    ],
    note: Note = "",
    bug: Annotated[str | None, typer.Option(help="A bug tracker link.")] = None,
    by: Actor = None,
) -> None:
    """Close a regression as fixed, wont_fix, false_positive or hardware_issue."""
    if as_ not in CLOSED:
        fail(f"--as {as_!r} is not a closing state; use one of {sorted(CLOSED)}", code=2)
    notifications = configuration().notifications
    _move(regression_id, as_, note, by, bug=bug)
    if notifications.announced_by == "flow":  # else Grafana's rule sends the RESOLVED
        _announce_resolved(regression_id, as_, _actor(by), notifications)


def _announce_resolved(
    regression_id: int, state: str, by: str, notifications: Notifications
) -> None:
    from kernelwatch.flows.notify import ResolvedNotice, send_resolved
    from kernelwatch.store.triage_state import show_regression

    with open_store() as conn:
        row = show_regression(conn, regression_id)
    notice = ResolvedNotice(regression_id, row["repository"] or "", row["title"], state, by)
    for problem in send_resolved(notice, notifications):
        stderr.print(f"warning: {problem}", markup=False, highlight=False)


@regressions_app.command(name="reset-baseline")
def reset_baseline_command(
    repository: Annotated[str, typer.Option(help="The repository whose baseline moves.")],
    commit: Annotated[str, typer.Option(help="The commit of the intended change (sha).")],
    note: Annotated[str, typer.Option(help="Why the change is intended.")],
    kernel: Annotated[
        str | None, typer.Option(help="Only this kernel's series (default: all).")
    ] = None,
    by: Actor = None,
) -> None:
    """Accept an intended change: detection restarts at COMMIT and the open regressions it
    explains close as wont_fix. History is kept."""
    from kernelwatch.store.triage_state import reset_baseline

    with open_store() as conn:
        moved = _guard(
            lambda: reset_baseline(conn, repository, commit, _actor(by), note, kernel=kernel)
        )
    typer.echo(f"baseline reset at {commit} in {repository}; {len(moved)} regression(s) closed")
    for m in moved:
        _echo_move(m)


def _move(regression_id: int, to: str, note: str, by: str | None, **fields: str | None) -> None:
    from kernelwatch.store.triage_state import apply_move

    with open_store() as conn:
        moved = _guard(
            lambda: apply_move(conn, regression_id, to, _actor(by), note or None, **fields)
        )
    _echo_move(moved)


def _guard(action: Callable[[], _T]) -> _T:
    from kernelwatch.store.triage_state import TriageNotFound

    try:
        return action()
    except (TriageError, TriageNotFound) as exc:
        fail(str(exc), code=2)


def _echo_move(moved: Moved) -> None:
    typer.echo(f"#{moved.regression_id}: {moved.before} -> {moved.after}")


def _actor(by: str | None) -> str:
    if by:
        return by
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def _short(sha: str | None) -> str:
    return sha[:10] if sha else "?"


def _out() -> Console:
    return output_console(160)
