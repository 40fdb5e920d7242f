"""``kernelwatch report``: write a self-contained HTML report of one run, of a repository's
latest nightly runs, or of one run against another, and print its path."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.connection import open_store
from kernelwatch.cli.console import fail


@app.command()
def report(
    run: Annotated[
        str | None,
        typer.Option("--run", metavar="ID", help="One run: its UUID, or a commit sha (prefix)."),
    ] = None,
    nightly: Annotated[
        bool, typer.Option("--nightly", help="The latest nightly run per device.")
    ] = False,
    repository: Annotated[
        str | None,
        typer.Option(help="With --nightly: the repository (default: the only one stored)."),
    ] = None,
    compare: Annotated[
        tuple[str, str] | None,
        typer.Option(
            "--compare",
            metavar="BASE HEAD",
            help="HEAD against BASE: run UUIDs, or commit shas (the latest run of each; "
            "BASE on HEAD's device).",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR", help="Folder for the report (default: report_dir of kernelwatch.toml)."
        ),
    ] = None,
) -> None:
    """Write one self-contained HTML report (no network needed to read it) and print its
    path. Exit 2 on bad input or an unknown run, 1 when the store is unreachable."""
    from kernelwatch.report.compare import comparison_from_runs
    from kernelwatch.report.html import (
        write_compare_report,
        write_nightly_report,
        write_run_report,
    )
    from kernelwatch.report.repro import repository_sources
    from kernelwatch.store.report_queries import RunNotFound, repositories, resolve_run

    chosen = sum([run is not None, nightly, compare is not None])
    if chosen != 1:
        fail("choose one of --run ID, --nightly or --compare BASE HEAD", code=2)
    if repository is not None and not nightly:
        fail("--repository goes with --nightly", code=2)
    settings = configuration()
    sources = repository_sources(settings)
    folder = out if out is not None else Path(settings.run.report_dir)
    with open_store(settings.database) as conn:
        try:
            if run is not None:
                path = write_run_report(conn, resolve_run(conn, run), folder, sources=sources)
            elif compare is not None:
                head = resolve_run(conn, compare[1])
                base = resolve_run(conn, compare[0], near=head)
                comparison = comparison_from_runs(conn, base, head, settings.thresholds)
                path = write_compare_report(conn, comparison, folder, sources=sources)
            else:
                name = repository or _only_repository(repositories(conn))
                path = write_nightly_report(conn, name, folder, sources=sources)
        except RunNotFound as exc:
            fail(str(exc), code=2)
        except OSError as exc:
            fail(f"cannot write the report in {folder}: {exc}", code=1)
    typer.echo(str(path))


def _only_repository(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    if not names:
        fail("the store holds no runs yet", code=2)
    fail(f"the store holds several repositories ({', '.join(names)}): pass --repository", code=2)
