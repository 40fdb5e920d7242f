"""What every command shares: the stderr console, the progress bar, the one-line failure."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

stderr = Console(stderr=True)


def progress() -> Progress:
    """A transient progress bar on stderr, silent when stderr is not a terminal."""
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=stderr,
        transient=True,
        disable=not stderr.is_terminal,
    )


def fail(message: str, code: int) -> NoReturn:
    """Print ``error: MESSAGE`` on one line and exit with ``code``."""
    stderr.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)
