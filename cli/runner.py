"""``kernelwatch runner``: serve the sandboxed children of a trusted side from a container
that holds no secret and has no network (``harness/isolation/remote.py``, docs/SECURITY.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.console import fail, stderr

runner_app = typer.Typer(
    no_args_is_help=True,
    help="The runner: kernel code's children, away from every credential.",
)


@runner_app.command()
def serve(
    requests: Annotated[
        Path, typer.Option(help="The exchange's requests directory (read-only here).")
    ],
    results: Annotated[
        Path, typer.Option(help="The exchange's results directory (written only here).")
    ],
) -> None:
    """Run the jobs the trusted side's proxies submit (only kernelwatch's own child entry
    points), each in this container's sandbox, until SIGTERM. Refuses to start while this
    process holds a secret: a secret-named variable, a file under /run/secrets, a
    service-account token, a kernelwatch.toml with a database URL."""
    from kernelwatch.harness.isolation.remote import RunnerRefused
    from kernelwatch.harness.isolation.remote import serve as serve_jobs

    try:
        stderr.print(f"runner: serving {requests} into {results}", markup=False)
        serve_jobs(requests, results)
    except RunnerRefused as exc:
        fail(str(exc), 2)
