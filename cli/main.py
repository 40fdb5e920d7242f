"""The ``kernelwatch`` entry point: the Typer app with every command module registered.

Importing a command module registers its commands on ``app`` (``cli/app.py``); the groups
``dashboards``, ``db``, ``regressions``, ``runner`` and ``serving`` are sub-apps.
``kernelwatch --help`` lists the commands in the order they are registered (the imports below,
which the linter keeps alphabetical), then the groups. No command module imports the
store's, Prefect's or Grafana's packages when it is loaded: a GPU host without them still
runs ``check``, ``bench`` and ``selfcheck``, and a command that needs one says so in one
line.
"""

from __future__ import annotations

# Imported for what importing does: each module registers its commands on ``app``.
from kernelwatch.cli import (  # noqa: F401
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
    runner,
    selfcheck,
    serving,
)
from kernelwatch.cli.app import app
from kernelwatch.cli.console import stderr
from kernelwatch.cli.signals import Terminated, end_children_on_signals
from kernelwatch.harness.isolation.sandbox import SandboxError

#: Packages only some commands need (the store, the flows, Grafana), by import name, with
#: the distribution that provides each.
OPTIONAL_PACKAGES = {
    "psycopg": "psycopg[binary]",
    "alembic": "alembic",
    "pgserver": "pgserver",
    "prefect": "prefect",
    "grafana_foundation_sdk": "grafana-foundation-sdk",
    "grafana_client": "grafana-client",
}

app.add_typer(db.db_app, name="db")
app.add_typer(regressions.regressions_app, name="regressions")
app.add_typer(runner.runner_app, name="runner")
app.add_typer(serving.serving_app, name="serving")


def main() -> None:
    """Console-script entry point. SIGTERM, SIGINT and SIGHUP end the kernel children first
    (they lead their own process groups, so ``timeout`` would not reach them), then exit
    with 128 + the signal's number; what was measured before is already written."""
    end_children_on_signals()
    try:
        app()
    except Terminated as stop:
        raise SystemExit(128 + stop.signum) from None
    except SandboxError as exc:
        # The host cannot isolate kernel code as configured: nothing ran, nothing to keep;
        # 2, every command's "could not be made" (pr-check must not read as a regression).
        stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise SystemExit(2) from None
    except ModuleNotFoundError as exc:
        top = (exc.name or "").partition(".")[0]
        if top not in OPTIONAL_PACKAGES:
            raise
        stderr.print(
            f"error: this command needs {top}, which is not installed here: pip install "
            f"'{OPTIONAL_PACKAGES[top]}' (check, bench and selfcheck run without it)",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        raise SystemExit(1) from None
