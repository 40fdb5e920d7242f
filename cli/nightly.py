"""``kernelwatch nightly``: the nightly flow on this machine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import PoolOption, RepositoryOption
from kernelwatch.cli.localrun import prepare_prefect, print_nightly, run_checked

if TYPE_CHECKING:
    from kernelwatch.flows.nightly import NightlySummary


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

    def run() -> NightlySummary:
        from kernelwatch.flows.nightly import nightly as nightly_flow

        return nightly_flow(repository=repository, pool=pool, rev=rev)

    summary = run_checked(
        "nightly: check, build, time, store, detect...", repository, pool, (rev,), run
    )
    print_nightly(summary)
    if summary.commit.status != "ok":
        raise typer.Exit(1)
