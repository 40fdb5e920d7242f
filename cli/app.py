"""The ``kernelwatch`` Typer application every command module registers on."""

from __future__ import annotations

import re
from typing import Any

import typer
from rich.markup import escape
from typer.core import TyperGroup


class LiteralHelpGroup(TyperGroup):
    """The root command group, whose help texts print as written, wrapped as paragraphs.

    Typer reads every help text as Rich markup, which swallows square-bracketed text:
    kernelwatch.toml's ``[detection]`` and ``[[thresholds]]`` would vanish from ``--help``.
    It also keeps a docstring's line breaks, so at 80 columns a description broke
    mid-sentence where its source line ended. No help text here is meant as markup or has
    lines of its own, so once the whole command tree is built (this group is built last,
    around it) each command's, group's and parameter's help is made one line a paragraph
    and escaped.
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
                setattr(holder, field, escape(_paragraphs(text)))
    for sub in getattr(command, "commands", {}).values():
        _escape_help(sub)


def _paragraphs(text: str) -> str:
    """``text`` with each paragraph (blank-line separated) on one line, for Rich to wrap."""
    return "\n\n".join(" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip()))


app = typer.Typer(
    cls=LiteralHelpGroup,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="kernelwatch: continuous performance-regression checks for GPU kernels.",
)


@app.callback()
def _root() -> None:
    """kernelwatch: continuous performance-regression checks for GPU kernels."""
