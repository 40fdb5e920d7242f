"""The ``kernelwatch`` command line: one Typer app, each command in its own module."""

from __future__ import annotations

from kernelwatch.flows import (
    bench_cli,
    build_cli,
    check_cli,
    dashboards_cli,
    db_cli,
    demo_cli,
    deploy_cli,
    detect_cli,
    regressions_cli,
    report_cli,
    run_cli,
)
from kernelwatch.flows.app import app

#: Importing a command module registers its commands on ``app``.
COMMAND_MODULES = (
    check_cli,
    bench_cli,
    build_cli,
    detect_cli,
    db_cli,
    regressions_cli,
    report_cli,
    run_cli,
    demo_cli,
    deploy_cli,
    dashboards_cli,
)

app.add_typer(db_cli.db_app, name="db")
app.add_typer(regressions_cli.regressions_app, name="regressions")


def main() -> None:
    """Console-script entry point."""
    app()
