"""``kernelwatch pr-check``: the pull-request flow on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import (
    DtypesOption,
    KernelOption,
    PoolOption,
    RepositoryOption,
)
from kernelwatch.cli.console import fail, stderr
from kernelwatch.cli.localrun import prepare_prefect, run_checked

if TYPE_CHECKING:
    from kernelwatch.flows.prcheck import PrCheckSummary

#: The last line's word for each outcome, which is also the exit status: 2 never reads as
#: "no regression".
VERDICTS = {
    0: "no regression",
    1: "regression",
    2: "no verdict: the comparison could not be made",
    3: "inconclusive: no case slower, but a case still AMBIGUOUS after more samples",
}


@app.command("pr-check")
def pr_check(
    base: Annotated[str, typer.Option(help="The pull request's base revision.")],
    head: Annotated[str, typer.Option(help="The pull request's head revision.")],
    repository: RepositoryOption = None,
    pool: PoolOption = "local",
    out: Annotated[Path | None, typer.Option(help="Where the comment and the report go.")] = None,
    pr: Annotated[
        int | None, typer.Option(min=1, help="The pull request's number, for the PR dashboard.")
    ] = None,
    branch: Annotated[str, typer.Option(help="The pull request's branch.")] = "",
    author: Annotated[str, typer.Option(help="The pull request's author.")] = "",
    kernel: KernelOption = None,
    workload: Annotated[
        str | None, typer.Option(help="Named workload (default: the repository's).")
    ] = None,
    dtype: DtypesOption = None,
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Only the cases with this parameter value, KEY=VALUE (repeatable; all of a "
            "case's parameters pin that case)."
        ),
    ] = None,
    every_case: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Time every case, also those whose build is identical at base and head.",
        ),
    ] = False,
) -> None:
    """Compare HEAD against BASE on this device: both checked, built and timed interleaved.
    Only the kernels whose build changed are timed (the rest: "identical build: not
    timed"; a head that changes no kernel: "no kernel changed"); --all times every case.
    Writes the PR comment (markdown) and the HTML report and prints their paths.

    Exit 0 no regression, 1 regression, 2 the check could not be made (or bad input), 3
    inconclusive: none slower, but a case still AMBIGUOUS after the extra samples ``[pr]``
    allows.
    """
    from kernelwatch.harness.suite import SelectionError, parse_params

    try:
        parse_params(param or ())
    except SelectionError as exc:
        fail(str(exc), code=2)
    prepare_prefect()

    def run() -> PrCheckSummary:
        from kernelwatch.flows.prcheck import pr_check as pr_check_flow

        return pr_check_flow(
            base=base,
            head=head,
            repository=repository,
            pool=pool,
            out_dir=str(out) if out else None,
            pr_number=pr,
            branch=branch,
            author=author,
            kernels=kernel,
            workload=workload,
            dtypes=dtype,
            params=param,
            every_case=every_case,
        )

    summary = run_checked(
        "pr-check: check, build, time base and head interleaved...",
        repository,
        pool,
        (base, head),
        run,
        unavailable=2,
    )
    if summary.error:
        fail(summary.error, code=2)
    said = VERDICTS[summary.outcome]
    if summary.verdict and summary.verdict != said:
        said = f"{said} ({summary.verdict})"
    stderr.print(f"pr-check {summary.head[:12]} vs {summary.base[:12]}: {said}")
    typer.echo(f"comment: {summary.comment}")
    typer.echo(f"report: {summary.report}")
    raise typer.Exit(summary.outcome)
