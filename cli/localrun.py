"""What the commands that run a Prefect flow on this machine share (``nightly``,
``pr-check``, ``bisect``, ``demo``): Prefect's local defaults, bad input turned into one line
before Prefect starts, and the summaries they print.

With no ``PREFECT_API_URL`` Prefect starts its local ephemeral API for the process, and the
store is the embedded PostgreSQL unless the configuration names a database: nothing to start
by hand. With ``PREFECT_API_URL`` set, the same flows report to that server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import typer

from kernelwatch.cli.console import fail, stderr

if TYPE_CHECKING:
    from kernelwatch.flows.bisection import BisectSummary
    from kernelwatch.flows.nightly import NightlySummary

_T = TypeVar("_T")

# Prefect's defaults for a run on a laptop or a CI machine: no telemetry, its per-task INFO
# lines left out of the way of kernelwatch's own output, and time for the ephemeral API to
# start: it migrates a new SQLite database first, which took longer than Prefect's 20 s
# on a 2-core machine running two test workers beside two other jobs.
_LOCAL_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
}


def prepare_prefect() -> None:
    """Set the local defaults above, unless the environment already chose, and exit 2 with
    one line when Prefect's local API could not keep its database. Call it before Prefect
    is first imported: it reads its settings then."""
    for key, value in _LOCAL_PREFECT.items():
        os.environ.setdefault(key, value)
    if os.environ.get("PREFECT_API_URL"):
        return  # a server keeps the flow runs; Prefect's home holds only optional settings
    # The ephemeral API's SQLite database lives in Prefect's home (~/.prefect). A container
    # run as a user of no account (HOME=/) cannot create it, and Prefect then warns, waits
    # out its whole start-up timeout (120 s above) and prints a page of tracebacks.
    home = Path(os.path.expanduser(os.environ.get("PREFECT_HOME") or "~/.prefect"))
    try:
        home.mkdir(mode=0o700, exist_ok=True)  # as Prefect makes it: its parent must exist
        writable = os.access(home, os.W_OK | os.X_OK)
    except OSError:
        writable = False
    if not writable:
        fail(
            f"Prefect's local API keeps its database in {home}, which cannot be written here: "
            "set PREFECT_HOME to a writable directory, or PREFECT_API_URL to a Prefect server",
            code=2,
        )


@contextmanager
def _failures(unavailable: int) -> Iterator[None]:
    """Turn the errors a person can fix into one line and an exit code: configuration,
    revisions and selections 2, an unreachable store or a failing git ``unavailable``."""
    from kernelwatch.config.tables import ConfigError
    from kernelwatch.flows.repos import InfrastructureError
    from kernelwatch.harness.isolation.worktree import RevisionError
    from kernelwatch.store.connect import SchemaMismatch, StoreUnavailable

    try:
        yield
    except (ConfigError, RevisionError, SchemaMismatch) as exc:
        fail(str(exc), code=2)
    except (StoreUnavailable, InfrastructureError) as exc:
        fail(str(exc), code=unavailable)


def run_checked(
    label: str,
    repository: str | None,
    pool: str,
    revisions: tuple[str | None, ...],
    call: Callable[[], _T],
    unavailable: int = 1,
) -> _T:
    """Check that the configuration names ``repository`` and ``pool``, that the
    repository has ``revisions`` and that kernel code may run here (exit 2 with the
    sandbox's refusal otherwise), then run ``call`` under a spinner. Bad input fails here in
    half a second with one line, not after Prefect has started (where a failing flow also
    logs its traceback): ``call`` imports its flow, so Prefect (1.5 s of CPU, the flows 2 s
    more) is not imported before. An unreachable store or failing git exits
    ``unavailable`` (a PR check's 2: its 1 means a regression)."""
    from kernelwatch.config.settings import load
    from kernelwatch.flows.repos import sync
    from kernelwatch.harness.isolation.sandbox import refusal
    from kernelwatch.harness.isolation.worktree import resolve

    with _failures(unavailable):
        config = load()
        repo = config.repository(repository)
        config.pool(pool)
        named = [rev for rev in revisions if rev is not None]
        if named:
            path = sync(repo)
            for rev in named:
                resolve(path, rev)
        refused = refusal()
        if refused is not None:
            fail(refused, code=2)
        with stderr.status(label):
            return call()


def print_nightly(summary: NightlySummary) -> None:
    """The nightly's outcome in a few lines on stderr (the report has the rest)."""
    c = summary.commit
    stderr.print(
        f"nightly {summary.repository} @ {c.sha[:12]}: {c.status}, {c.cases} cases checked, "
        f"{c.measured} timed"
    )
    if c.error:
        stderr.print(f"  error: {c.error}", markup=False)
    for kernel, reason in sorted(c.failed.items()):
        stderr.print(f"  {kernel} failed: {reason}", markup=False)
    if c.untimed:
        stderr.print(f"  {c.untimed}", markup=False)
    for line in [*summary.unjudged_lines(), *summary.night_lines()]:
        stderr.print(f"  {line.removeprefix('- ')}", markup=False, highlight=False)
    stderr.print(
        f"  detection: {summary.change_points} new change points, "
        f"{len(summary.opened)} regressions opened, {len(summary.closed)} closed"
    )
    for bisection in summary.bisections:
        print_bisection(bisection)
    for problem in summary.problems:
        stderr.print(f"  warning: {problem}", markup=False)
    if summary.report:
        typer.echo(f"report: {summary.report}")


def print_bisection(summary: BisectSummary) -> None:
    """One line per bisection: the culprit, or why there is none."""
    stderr.print(f"  bisect: {summary.line()}", markup=False, highlight=False)
