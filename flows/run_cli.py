"""``kernelwatch nightly``, ``pr-check`` and ``bisect``: the Prefect flows, run on this
machine.

With no ``PREFECT_API_URL`` Prefect starts its local ephemeral API for the process, and the
store is the embedded PostgreSQL unless the configuration names a database: nothing to start
by hand. With ``PREFECT_API_URL`` set, the same flows report to that server.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from kernelwatch.flows.app import app
from kernelwatch.flows.console import fail, stderr
from kernelwatch.flows.options import KernelOption

if TYPE_CHECKING:
    from kernelwatch.flows.bisection import BisectSummary
    from kernelwatch.flows.nightly import NightlySummary

_T = TypeVar("_T")

RepositoryOption = Annotated[
    str | None,
    typer.Option(help="A repository of the configuration (default: the only one)."),
]
PoolOption = Annotated[str, typer.Option(help="The pool this machine stands for.")]

# Prefect's defaults for a run on a laptop or a CI machine: no telemetry, and its per-task
# INFO lines left out of the way of kernelwatch's own output.
_LOCAL_PREFECT = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_LOGGING_LEVEL": "WARNING",
}


def prepare_prefect() -> None:
    """Set the local defaults above, unless the environment already chose. Call it before
    Prefect is first imported: it reads its settings then."""
    for key, value in _LOCAL_PREFECT.items():
        os.environ.setdefault(key, value)


@contextmanager
def _failures() -> Iterator[None]:
    """Turn the errors a person can fix into one line and an exit code: configuration,
    revisions and selections 2, an unreachable store 1."""
    from kernelwatch.flows.repos import InfrastructureError
    from kernelwatch.harness.worktree import RevisionError
    from kernelwatch.store.config import ConfigError
    from kernelwatch.store.connect import SchemaMismatch, StoreUnavailable

    try:
        yield
    except (ConfigError, RevisionError, SchemaMismatch) as exc:
        fail(str(exc), code=2)
    except (StoreUnavailable, InfrastructureError) as exc:
        fail(str(exc), code=1)


def _run(
    label: str,
    repository: str | None,
    pool: str,
    revisions: tuple[str | None, ...],
    call: Callable[[], _T],
) -> _T:
    """Check that the configuration names ``repository`` and ``pool`` and that the
    repository has ``revisions``, then run ``call`` under a spinner. Bad input fails here in
    a second with one line, not after Prefect has started (where a failing flow also logs
    its traceback)."""
    from kernelwatch.flows.config import load
    from kernelwatch.flows.repos import sync
    from kernelwatch.harness.worktree import resolve

    with _failures():
        config = load()
        repo = config.repository(repository)
        config.pool(pool)
        named = [rev for rev in revisions if rev is not None]
        if named:
            path = sync(repo)
            for rev in named:
                resolve(path, rev)
        with stderr.status(label):
            return call()


@app.command()
def nightly(
    repository: RepositoryOption = None,
    pool: PoolOption = "local",
    rev: Annotated[
        str | None, typer.Option(help="Run at this revision instead of the branch head.")
    ] = None,
) -> None:
    """Run the nightly pipeline here: check, build and time the branch head, store it,
    detect regressions over the stored history, bisect what is new, write the report.

    Exit 0 when the commit ran cleanly (regressions found are results, not failures), 1 when
    some kernel failed or nothing could run, 2 on bad input.
    """
    prepare_prefect()
    from kernelwatch.flows.nightly import nightly as nightly_flow

    summary = _run(
        "nightly: check, build, time, store, detect...",
        repository,
        pool,
        (rev,),
        lambda: nightly_flow(repository=repository, pool=pool, rev=rev),
    )
    print_nightly(summary)
    if summary.commit.status != "ok":
        raise typer.Exit(1)


@app.command("pr-check")
def pr_check(
    base: Annotated[str, typer.Option(help="The pull request's base revision.")],
    head: Annotated[str, typer.Option(help="The pull request's head revision.")],
    repository: RepositoryOption = None,
    pool: PoolOption = "local",
    out: Annotated[Path | None, typer.Option(help="Where the comment and the report go.")] = None,
) -> None:
    """Compare HEAD against BASE on this device: both checked, built and timed interleaved.
    Writes the PR comment (markdown) and the HTML report and prints their paths.

    Exit 0 no regression, 1 regression, 2 the check could not be made (or bad input).
    """
    prepare_prefect()
    from kernelwatch.flows.prcheck import pr_check as pr_check_flow

    summary = _run(
        "pr-check: check, build, time base and head interleaved...",
        repository,
        pool,
        (base, head),
        lambda: pr_check_flow(
            base=base,
            head=head,
            repository=repository,
            pool=pool,
            out_dir=str(out) if out else None,
        ),
    )
    if summary.error:
        fail(summary.error, code=2)
    verdict = "regression" if summary.outcome == 1 else "no regression"
    stderr.print(f"pr-check {summary.head[:12]} vs {summary.base[:12]}: {verdict}")
    typer.echo(f"comment: {summary.comment}")
    typer.echo(f"report: {summary.report}")
    raise typer.Exit(summary.outcome)


@app.command()
def bisect(
    good: Annotated[str | None, typer.Option(help="A revision without the regression.")] = None,
    bad: Annotated[str | None, typer.Option(help="A revision with it.")] = None,
    regression: Annotated[
        int | None, typer.Option(help="Bisect this stored regression's range and cases.")
    ] = None,
    repository: RepositoryOption = None,
    pool: PoolOption = "local",
    kernel: KernelOption = None,
) -> None:
    """Find the commit that made kernels slower: a binary search on interleaved A/B
    verdicts between GOOD and BAD (or a regression's range), within the configured
    device-time budget. The culprit is written back to the regression.

    Exit 0 when a culprit was found, 1 when not (not reproduced, inconclusive or out of
    budget), 2 on bad input.
    """
    if regression is None and (good is None or bad is None):
        fail("pass --good REV and --bad REV, or --regression ID", code=2)
    prepare_prefect()
    from kernelwatch.flows.bisection import bisect as bisect_flow

    summary = _run(
        "bisect: timing probes interleaved against the good commit...",
        repository,
        pool,
        (good, bad),
        lambda: bisect_flow(
            repository=repository,
            good=good,
            bad=bad,
            regression_id=regression,
            pool=pool,
            kernels=tuple(kernel or ()),
        ),
    )
    print_bisection(summary)
    if summary.culprit is None:
        raise typer.Exit(1)


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
