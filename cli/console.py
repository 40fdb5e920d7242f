"""What every command shares: the stderr console, the progress bar, the one-line failure."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelwatch.config.redact import printable
from kernelwatch.harness.records import CorrectnessResult, Measurement
from kernelwatch.harness.timing.pinning import (
    PinFileError,
    Pins,
    load_pins,
    pins_from_records,
    pins_to_json,
)


class TextConsole(Console):
    """A console for text from the store, kernels and users, printed as text: Rich markup
    is off, so an assignee named "[/red]" is shown as it is, never parsed, and terminal
    escape sequences a kernel wrote are dropped (:func:`printable`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(markup=False, **options)

    def print(self, *objects: Any, **options: Any) -> None:
        """Rich's ``print``, with every string made printable first."""
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **options)


class TextTable(Table):
    """A table whose string cells are made printable (:func:`printable`): a kernel's error
    or parameter cannot reach the terminal as an escape sequence."""

    def add_row(self, *cells: RenderableType | None, **options: Any) -> None:
        """Rich's ``add_row``, with every string cell made printable first."""
        super().add_row(*(printable(c) if isinstance(c, str) else c for c in cells), **options)


stderr = TextConsole(stderr=True)


def output_console(width: int) -> Console:
    """The stdout console for tables: the terminal's width, or ``width`` when piped."""
    return TextConsole() if sys.stdout.isatty() else TextConsole(width=width)


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


def read_pins(path: Path | None) -> Pins:
    """The pin file at ``path`` (none: no pins); a malformed one exits 2."""
    if path is None:
        return {}
    try:
        return load_pins(path)
    except PinFileError as exc:
        fail(str(exc), code=2)


def save_pins(path: Path | None, records: Iterable[Measurement | CorrectnessResult]) -> None:
    """Write the configs of ``records`` (verified or timed) to ``path`` as a pin file."""
    if path is not None:
        path.write_text(json.dumps(pins_to_json(pins_from_records(records)), indent=2) + "\n")


def fail(message: str, code: int) -> NoReturn:
    """Print ``error: MESSAGE`` on one line and exit with ``code``."""
    stderr.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def write_whole_line(text: str) -> None:
    """Write one line on stdout with the stop signals held back until it is out, so a
    reader never gets half a record."""
    from kernelwatch.cli.signals import STOP_SIGNALS

    held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stream_records(
    label: str,
    run: Callable[[Callable[[int], None]], Iterable[_R]],
    json_lines: bool,
    table: Callable[[list[_R]], None],
) -> list[_R]:
    """Drive ``run`` (given a callback that receives the case count once planned) under a
    progress bar, one step per record; with ``json_lines`` each record is printed on stdout
    as it arrives, so a crash or a stop signal later loses none of the earlier ones, else
    ``table`` prints them all at the end, or those measured when a stop signal arrived."""
    from kernelwatch.cli.signals import Terminated

    records: list[_R] = []
    try:
        with progress() as bar_ui:
            bar = bar_ui.add_task(label, total=None)
            for record in run(lambda cases: bar_ui.update(bar, total=cases)):
                records.append(record)
                bar_ui.update(bar, advance=1, description=record.case.kernel)
                if json_lines:
                    write_whole_line(record.dumps())
    except Terminated as stop:
        if not json_lines:
            table(records)
        stderr.print(f"{label}: stopped by {stop} after {len(records)} cases; those are kept")
        raise
    if not json_lines:
        table(records)
    return records
