"""``kernelwatch detect FILE.jsonl``: change points in series given as JSON lines, with a
change in the newest points reported as soon as it is clear (``"provisional": true``).

Each line is one series: ``{"id": ..., "y": [numbers], "t"?: [...], "rev"?: [...],
"lower_is_better"?: bool, "kernel"?: str}``, ``y`` in commit order (times by default, so
lower is better). The thresholds are kernelwatch.toml's ``[detection]``; a line that names
its ``kernel`` gets that kernel's ``[[thresholds]]`` override, as the nightly's series do.
The whole file is validated before anything is printed, so output is never half a file.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from kernelwatch.analysis.changepoints import ChangePoint, Detection, detect
from kernelwatch.analysis.drift import Drift
from kernelwatch.analysis.thresholds import DetectorConfig, Thresholds
from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import JsonOption
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import TextTable, fail, output_console, progress, stderr
from kernelwatch.config.redact import printable


@dataclass(frozen=True)
class SeriesInput:
    """One validated input line."""

    line: int
    id: Any
    y: list[float]
    t: list[Any] | None
    rev: list[Any] | None
    lower_is_better: bool
    kernel: str | None

    def config(self, thresholds: Thresholds) -> DetectorConfig:
        """The detector settings for this series: its kernel's, or the defaults."""
        own = thresholds.for_kernel(self.kernel) if self.kernel is not None else thresholds
        return replace(own.detection, lower_is_better=self.lower_is_better)


@dataclass(frozen=True)
class SeriesResult:
    """A series, the settings it was judged by, and the verdict."""

    series: SeriesInput
    config: DetectorConfig
    found: Detection


@app.command("detect")
def detect_command(
    file: Annotated[Path, typer.Argument(help="JSON lines, one series per line; - for stdin.")],
    json_out: JsonOption = False,
    fail_on_regression: Annotated[
        bool, typer.Option(help="Exit 1 when any series has a regression.")
    ] = False,
) -> None:
    """Find change points in each series: where the level moved, which way, by how much.

    A change in the newest points is reported as soon as it is clear, marked provisional
    until enough points follow it for the scan to settle it. A series shorter than two
    regimes is reported as too_short, not as unchanged. The
    thresholds are kernelwatch.toml's [detection] (per kernel: [[thresholds]]). Exit 0, or 1
    with --fail-on-regression when a regression was found; 2 on bad input.
    """
    thresholds = configuration().thresholds
    series = _read(file)
    results: list[SeriesResult] = []
    with progress() as bar_ui:
        bar = bar_ui.add_task("detecting", total=len(series))
        for s in series:
            config = s.config(thresholds)
            results.append(SeriesResult(s, config, detect(s.y, config, provisional=True)))
            bar_ui.update(bar, advance=1)
    if json_out:
        for result in results:
            sys.stdout.write(json.dumps(_to_json(result)) + "\n")
    else:
        _print_table(results)
    points = [cp for r in results for cp in r.found.change_points]
    regressions = sum(cp.direction == "regression" for cp in points)
    too_short = sum(r.found.status == "too_short" for r in results)
    stderr.print(
        f"detect: {len(results)} series, {regressions} regressions, "
        f"{len(points) - regressions} improvements, {too_short} too short to judge"
    )
    if fail_on_regression and regressions:
        raise typer.Exit(1)


def _read(file: Path) -> list[SeriesInput]:
    try:
        text = sys.stdin.read() if str(file) == "-" else file.read_text()
    except OSError as exc:
        fail(f"cannot read {file}: {exc.strerror}", code=2)
    except UnicodeDecodeError as exc:
        fail(f"{file} is not UTF-8 text (byte {exc.start}); write JSON lines", code=2)
    out = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            out.append(_parse(number, raw))
    if not out:
        fail(f"{file} holds no series; write one JSON object per line", code=2)
    return out


def _parse(line: int, raw: str) -> SeriesInput:
    where = f"line {line}"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        fail(f"{where}: not JSON ({exc.msg}); write one JSON object per line", code=2)
    except (RecursionError, ValueError) as exc:  # nested too deep, a number too long
        fail(f"{where}: not readable JSON ({type(exc).__name__}); one flat object a line", 2)
    if not isinstance(data, dict):
        fail(f"{where}: expected a JSON object with a 'y' list, got {type(data).__name__}", 2)
    if "y" not in data:
        fail(f"{where}: missing 'y' (the list of values in commit order)", code=2)
    y = data["y"]
    if not isinstance(y, list) or not y:
        fail(f"{where}: 'y' must be a non-empty list of numbers", code=2)
    for i, v in enumerate(y):
        if isinstance(v, bool) or not isinstance(v, int | float) or not _finite(v):
            fail(f"{where}: y[{i}] is {json.dumps(v)}; 'y' must hold finite numbers", code=2)
        if v <= 0:
            fail(f"{where}: y[{i}] is {v}; values must be positive times or rates", code=2)
    for key in ("t", "rev"):
        extra = data.get(key)
        if extra is not None and (not isinstance(extra, list) or len(extra) != len(y)):
            fail(f"{where}: '{key}' must be a list as long as 'y' ({len(y)})", code=2)
    lower = data.get("lower_is_better", True)
    if not isinstance(lower, bool):
        fail(f"{where}: 'lower_is_better' must be true or false", code=2)
    kernel = data.get("kernel")
    if kernel is not None and not isinstance(kernel, str):
        fail(f"{where}: 'kernel' must be a string (the kernel's name)", code=2)
    return SeriesInput(line, data.get("id", line), y, data.get("t"), data.get("rev"), lower, kernel)


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer beyond any float
        return False


#: Why a change an earlier night reported is no longer reported.
WITHDRAWN_REASON = "level returned"


def _to_json(result: SeriesResult) -> dict[str, Any]:
    s, found = result.series, result.found

    def point(cp: ChangePoint) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": cp.index,
            "direction": cp.direction,
            "magnitude_pct": round(cp.magnitude_pct, 4),
            "p_value": cp.p_value,
            "provisional": cp.provisional,
        }
        if s.rev is not None:
            out["rev"] = s.rev[cp.index]
        if s.t is not None:
            out["t"] = s.t[cp.index]
        if cp.drift is not None:
            d = cp.drift
            out["drift"] = {
                "start": d.start,
                "end": d.end,
                "slope_pct": round(d.slope_pct, 4),
                "total_pct": round(d.total_pct, 4),
                "ongoing": d.ongoing,
            }
        return out

    out: dict[str, Any] = {"id": s.id, "status": found.status, "n": found.n}
    if found.status == "too_short":
        out["needs"] = 2 * result.config.min_size
    else:
        out["noise_pct"] = round(found.noise_pct, 4)
    out["change_points"] = [point(cp) for cp in found.change_points]
    if found.withdrawn:
        out["withdrawn"] = [{**point(cp), "reason": WITHDRAWN_REASON} for cp in found.withdrawn]
    return out


def _print_table(results: list[SeriesResult]) -> None:
    out = output_console(160)
    table = TextTable(title="change points")
    for column in ("series", "points", "noise", "status", "change points"):
        table.add_column(column, overflow="fold")
    for result in results:
        s, found = result.series, result.found
        if found.status == "too_short":
            status = Text(f"too short (needs {2 * result.config.min_size})", style="yellow")
            noise = "-"
        else:
            status = Text("no change", style="green") if not found.change_points else "changed"
            noise = f"{found.noise_pct:.2f}%"
        lines = Text("\n").join(
            Text.assemble(
                (cp.direction, "bold red" if cp.direction == "regression" else "green"),
                f" at {cp.index}"
                + (f" ({printable(s.rev[cp.index])})" if s.rev is not None else ""),
                f": {cp.magnitude_pct:+.2f}% (p={cp.p_value:.1e})"
                + (_drifting(cp.drift) if cp.drift is not None else ""),
                (" provisional", "yellow") if cp.provisional else "",
            )
            for cp in found.change_points
        )
        for cp in found.withdrawn:
            lines.append(f"\n{cp.direction} at {cp.index} withdrawn: {WITHDRAWN_REASON}")
        table.add_row(str(s.id), str(found.n), noise, status, lines or "-")
    out.print(table)


def _drifting(drift: Drift) -> str:
    """A drift's line after its change: its slope, and where it stopped."""
    until = "and still drifting" if drift.ongoing else f"until {drift.end}"
    return f", drifting {drift.slope_pct:+.2f}%/point {until}"
