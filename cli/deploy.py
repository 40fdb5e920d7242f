"""``kernelwatch deploy``: create or update the fleet's Prefect deployments from the
configuration (needs ``PREFECT_API_URL`` pointing at the fleet's Prefect server)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import fail, stderr


@app.command()
def deploy(
    pool: Annotated[
        list[str] | None, typer.Option("--pool", help="Only this pool (repeatable).")
    ] = None,
    source: Annotated[
        Path | None,
        typer.Option(help="The kernelwatch checkout on the workers (default: this one)."),
    ] = None,
    pool_type: Annotated[
        str, typer.Option(help="Type of work pools created if missing: process or kubernetes.")
    ] = "process",
    dry_run: Annotated[bool, typer.Option(help="Print the plan; change nothing.")] = False,
) -> None:
    """Create or update a scheduled nightly per pool and repository, and on-demand pr_check
    and bisect deployments per pool, on the Prefect server at PREFECT_API_URL."""
    from kernelwatch.config.tables import ConfigError
    from kernelwatch.flows import deployments

    try:
        specs = deployments.plan(configuration(), pool or ())
    except ConfigError as exc:
        fail(str(exc), code=2)
    if not specs:
        fail("no [pools] configured: add one per GPU type (docs/CONFIG.md)", code=2)
    for spec in specs:
        when = f"cron {spec.cron} {spec.timezone}" if spec.cron else "on demand"
        typer.echo(f"{spec.flow}/{spec.name} -> work pool {spec.work_pool} ({when})")
    if dry_run:
        return
    ids = deployments.apply(specs, source or deployments.project_root(), pool_type)
    stderr.print(f"deploy: {len(ids)} deployments created or updated")
