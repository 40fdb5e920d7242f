"""``kernelwatch nightly``: the nightly flow on this machine."""

from __future__ import annotations

from typing import Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import PoolOption, RepositoryOption
from kernelwatch.cli.localrun import prepare_prefect, print_nightly, run_checked


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

    summary = run_checked(
        "nightly: check, build, time, store, detect...",
        repository,
        pool,
        (rev,),
        lambda: nightly_flow(repository=repository, pool=pool, rev=rev),
    )
    print_nightly(summary)
    if summary.commit.status != "ok":
        raise typer.Exit(1)
