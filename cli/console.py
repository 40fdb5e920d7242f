"""What every command shares: the stderr console, the progress bar, the one-line failure."""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kernelwatch.harness.records import CorrectnessResult, Measurement
from kernelwatch.harness.timing.pinning import (
    PinFileError,
    Pins,
    load_pins,
    pins_from_records,
    pins_to_json,
)

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
