"""What every command shares: the stderr console, the progress bar, the one-line failure."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kernelwatch.harness.records import CorrectnessResult, Measurement

# Text from the store, kernels and users is printed as text: Rich markup is off everywhere,
# so an assignee named "[/red]" or a kernel's error is shown as it is, never parsed.
stderr = Console(stderr=True, markup=False)


def output_console(width: int) -> Console:
    """The stdout console for tables: the terminal's width, or ``width`` when piped."""
    return Console(markup=False) if sys.stdout.isatty() else Console(width=width, markup=False)


_R = TypeVar("_R", CorrectnessResult, Measurement)


def progress() -> Progress:
    """A transient progress bar on stderr, silent when stderr is not a terminal."""
    return Progress(
        TextColumn("{task.description}", style="progress.description", markup=False),
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


def stream_records(
    label: str, run: Callable[[Callable[[int], None]], Iterable[_R]], json_lines: bool
) -> list[_R]:
    """Drive ``run`` (given a callback that receives the case count once planned) under a
    progress bar, one step per record; with ``json_lines`` each record is printed on stdout
    as it arrives, so a crash later loses none of the earlier ones."""
    records: list[_R] = []
    with progress() as bar_ui:
        bar = bar_ui.add_task(label, total=None)
        for record in run(lambda cases: bar_ui.update(bar, total=cases)):
            records.append(record)
            bar_ui.update(bar, advance=1, description=record.case.kernel)
            if json_lines:
                sys.stdout.write(record.dumps() + "\n")
                sys.stdout.flush()
    return records
