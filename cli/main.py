"""The ``kernelwatch`` entry point: the Typer app with every command module registered.

Importing a command module registers its commands on ``app`` (``cli/app.py``); the groups
``db`` and ``regressions`` are sub-apps.
"""

from __future__ import annotations

from kernelwatch.cli import (
    bench,
    bisect,
    build,
    check,
    dashboards,
    db,
    demo,
    deploy,
    detect,
    init,
    nightly,
    pr_check,
    regressions,
    report,
    selfcheck,
)
from kernelwatch.cli.app import app

#: In the order ``kernelwatch --help`` lists them.
COMMAND_MODULES = (
    init,
    check,
    bench,
    selfcheck,
    build,
    detect,
    db,
    regressions,
    report,
    nightly,
    pr_check,
    bisect,
    demo,
    deploy,
    dashboards,
)

app.add_typer(db.db_app, name="db")
app.add_typer(regressions.regressions_app, name="regressions")


def main() -> None:
    """Console-script entry point."""
    app()
