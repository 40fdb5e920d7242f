"""The ``kernelwatch`` Typer application every command module registers on."""

from __future__ import annotations

from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup


class LiteralHelpGroup(TyperGroup):
    """The root command group, whose help texts print as written.

    Typer reads every help text as Rich markup, which swallows square-bracketed text:
    kernelwatch.toml's ``[detection]`` and ``[[thresholds]]`` would vanish from ``--help``.
    No help text here is meant as markup, so once the whole command tree is built (this
    group is built last, around it) each command's, group's and parameter's help is escaped.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        if self.rich_markup_mode == "rich":
            _escape_help(self)


def _escape_help(command: Any) -> None:
    for holder in (command, *command.params):
        for field in ("help", "short_help", "epilog"):
            text = getattr(holder, field, None)
            if text:
                setattr(holder, field, escape(text))
    for sub in getattr(command, "commands", {}).values():
        _escape_help(sub)


app = typer.Typer(
    cls=LiteralHelpGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="kernelwatch: continuous performance-regression checks for GPU kernels.",
)


@app.callback()
def _root() -> None:
    """kernelwatch: continuous performance-regression checks for GPU kernels."""
