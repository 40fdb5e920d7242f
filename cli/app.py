"""The ``kernelwatch`` Typer application every command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="kernelwatch: continuous performance-regression checks for GPU kernels.",
)


@app.callback()
def _root() -> None:
    """kernelwatch: continuous performance-regression checks for GPU kernels."""
