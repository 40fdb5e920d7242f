"""``kernelwatch bisect``: the bisection flow on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import KernelOption, PoolOption, RepositoryOption
from kernelwatch.cli.console import fail
from kernelwatch.cli.localrun import prepare_prefect, print_bisection, run_checked

if TYPE_CHECKING:
    from kernelwatch.flows.bisection import BisectSummary


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
    if regression is not None:
        _check_regression(regression)
    prepare_prefect()

    def run() -> BisectSummary:
        from kernelwatch.flows.bisection import bisect as bisect_flow

        return bisect_flow(
            repository=repository,
            good=good,
            bad=bad,
            regression_id=regression,
            pool=pool,
            kernels=tuple(kernel or ()),
        )

    summary = run_checked(
        "bisect: timing probes interleaved against the good commit...",
        repository,
        pool,
        (good, bad),
        run,
    )
    print_bisection(summary)
    if summary.culprit is None:
        raise typer.Exit(1)


def _check_regression(regression_id: int) -> None:
    """Exit 2 with one line when the store has no such regression."""
    from kernelwatch.cli.connection import open_store
    from kernelwatch.store.triage_state import TriageNotFound, show_regression

    with open_store() as conn:
        try:
            show_regression(conn, regression_id)
        except TriageNotFound as exc:
            fail(str(exc), code=2)
