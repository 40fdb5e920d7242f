"""Charts as inline SVG text: a series' history, speed-of-light per kernel, and A/B ratios
with their confidence intervals.

Drawn here rather than by a charting library so a report stays one small file that any
browser (or a CI artifact viewer) shows without scripts or network. Every data mark carries
a ``<title>`` (the browser's tooltip) and a class the report's tests query.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from markupsafe import escape

from kernelwatch.report import format as fmt

WIDTH = 720
_PAD_LEFT, _PAD_RIGHT, _PAD_TOP, _PAD_BOTTOM = 70, 20, 24, 30


@dataclass(frozen=True)
class HistoryPoint:
    """One history point: the median with its CI, the commit, and the tick text (a date)."""

    median_ns: float
    ci_low_ns: float | None
    ci_high_ns: float | None
    commit: str | None
    tick: str


@dataclass(frozen=True)
class Marker:
    """A vertical line at ``x`` (a point index; halfway values fall between points)."""

    x: float
    label: str
    kind: str  # "change-point" or "culprit"


@dataclass(frozen=True)
class SolCase:
    """One case's share of the device's roofline."""

    label: str
    pct_sol: float
    bound: str | None


@dataclass(frozen=True)
class RatioRow:
    """One case's head/base ratio with its confidence interval and verdict."""

    label: str
    ratio: float
    ci_low: float
    ci_high: float
    verdict: str


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values (1, 2 or 5 times a power of ten apart) covering
    ``low``..``high``."""
    if not (math.isfinite(low) and math.isfinite(high)):
        raise ValueError("tick range must be finite")
    if high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step - 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def history_chart(
    points: Sequence[HistoryPoint], markers: Sequence[Marker], levels: Sequence[tuple[int, int]]
) -> str:
    """A series' medians over its history (oldest first) with the CI band, the level of each
    regime (``levels``: index ranges, end exclusive) and vertical ``markers``."""
    if not points:
        raise ValueError("a history chart needs at least one point")
    height = 240
    lows = [p.ci_low_ns if p.ci_low_ns is not None else p.median_ns for p in points]
    highs = [p.ci_high_ns if p.ci_high_ns is not None else p.median_ns for p in points]
    y_lo, y_hi = _padded(min(lows), max(highs))
    x = _linear(-0.5, len(points) - 0.5, _PAD_LEFT, WIDTH - _PAD_RIGHT)
    y = _linear(y_lo, y_hi, height - _PAD_BOTTOM, _PAD_TOP)
    parts = [_frame(height, "history"), _y_axis(y_lo, y_hi, y, fmt.duration)]
    step = max(1, math.ceil(len(points) / 8))
    for i in range(0, len(points), step):
        parts.append(_text(x(i), height - 10, points[i].tick, "tick x", "middle"))
    band = [(x(i), y(v)) for i, v in enumerate(highs)] + [
        (x(i), y(v)) for i, v in reversed(list(enumerate(lows)))
    ]
    parts.append(f'<path class="ci-band" d="{_path(band)} Z"/>')
    for start, end in levels:
        level = _median([p.median_ns for p in points[start:end]])
        segment = _path([(x(start - 0.4), y(level)), (x(end - 0.6), y(level))])
        parts.append(
            f'<path class="level" d="{segment}">'
            f"<title>level {escape(fmt.duration(level))}</title></path>"
        )
    parts.append(
        f'<path class="line" d="{_path([(x(i), y(p.median_ns)) for i, p in enumerate(points)])}"/>'
    )
    for i, p in enumerate(points):
        tip = f"{p.tick} {fmt.sha(p.commit)}: {fmt.duration(p.median_ns)}"
        if p.ci_low_ns is not None and p.ci_high_ns is not None:
            tip += f" (95% CI {fmt.duration(p.ci_low_ns)} to {fmt.duration(p.ci_high_ns)})"
        parts.append(
            f'<circle class="point" cx="{x(i):.1f}" cy="{y(p.median_ns):.1f}" r="3" '
            f'data-commit="{escape(p.commit or "")}"><title>{escape(tip)}</title></circle>'
        )
    for row, marker in enumerate(markers):
        mx = x(marker.x)
        parts.append(
            f'<line class="marker {marker.kind}" x1="{mx:.1f}" x2="{mx:.1f}" '
            f'y1="{_PAD_TOP}" y2="{height - _PAD_BOTTOM}">'
            f"<title>{escape(marker.label)}</title></line>"
        )
        anchor = "end" if mx > WIDTH / 2 else "start"
        dx = -4 if anchor == "end" else 4
        parts.append(
            _text(mx + dx, _PAD_TOP + 10 + 12 * row, marker.label, f"label {marker.kind}", anchor)
        )
    return "".join(parts) + "</svg>"


def sol_chart(kernels: Sequence[tuple[str, Sequence[SolCase]]]) -> str:
    """Per kernel, the share of the roofline each case achieved (dots) and their median (the
    bar), against the peak at 100 %."""
    if not kernels:
        raise ValueError("a speed-of-light chart needs at least one kernel")
    row_h, label_w = 26, 160
    height = _PAD_TOP + row_h * len(kernels) + _PAD_BOTTOM
    top = max(100.0, max(c.pct_sol for _, cases in kernels for c in cases))
    x = _linear(0.0, top, label_w, WIDTH - _PAD_RIGHT - 60)
    parts = [_frame(height, "sol")]
    for tick in nice_ticks(0.0, top, 5):
        parts.append(_grid_x(x(tick), height, f"{tick:g}%"))
    parts.append(
        f'<line class="peak" x1="{x(100):.1f}" x2="{x(100):.1f}" y1="{_PAD_TOP - 6}" '
        f'y2="{height - _PAD_BOTTOM}"><title>peak (100% of the roofline)</title></line>'
    )
    parts.append(_text(x(100), _PAD_TOP - 10, "peak", "label peak", "middle"))
    for row, (kernel, cases) in enumerate(kernels):
        mid = _PAD_TOP + row_h * row + row_h / 2
        median = _median([c.pct_sol for c in cases])
        bounds = sorted({c.bound for c in cases if c.bound})
        parts.append(_text(label_w - 8, mid + 4, kernel, "label kernel", "end"))
        parts.append(
            f'<rect class="bar" x="{x(0):.1f}" y="{mid - 7:.1f}" width="{x(median) - x(0):.1f}" '
            f'height="14"><title>{escape(kernel)}: median {fmt.percent(median)} of the roofline '
            f"over {len(cases)} case(s)</title></rect>"
        )
        for case in cases:
            bound = case.bound or "bound unknown"
            tip = f"{kernel} {case.label}: {fmt.percent(case.pct_sol)} ({bound})"
            parts.append(
                f'<circle class="case" cx="{x(case.pct_sol):.1f}" cy="{mid:.1f}" r="3">'
                f"<title>{escape(tip)}</title></circle>"
            )
        note = f"{fmt.percent(median, 0)} {'/'.join(bounds)}".strip()
        parts.append(_text(WIDTH - _PAD_RIGHT - 56, mid + 4, note, "label value", "start"))
    return "".join(parts) + "</svg>"


def ratio_chart(rows: Sequence[RatioRow], margin: float) -> str:
    """Each case's head/base ratio with its CI whiskers, the ±``margin`` band of "the same"
    shaded around 1."""
    if not rows:
        raise ValueError("a ratio chart needs at least one row")
    row_h, label_w = 22, 250
    height = _PAD_TOP + row_h * len(rows) + _PAD_BOTTOM
    lo = min(min(r.ci_low for r in rows), 1 - 2 * margin)
    hi = max(max(r.ci_high for r in rows), 1 + 2 * margin)
    lo, hi = _padded(lo, hi)
    x = _linear(lo, hi, label_w, WIDTH - _PAD_RIGHT)
    parts = [_frame(height, "ratios")]
    parts.append(
        f'<rect class="margin-band" x="{x(1 - margin):.1f}" y="{_PAD_TOP}" '
        f'width="{x(1 + margin) - x(1 - margin):.1f}" height="{height - _PAD_TOP - _PAD_BOTTOM}">'
        f"<title>within ±{margin:.1%}: the same</title></rect>"
    )
    for tick in nice_ticks(lo, hi, 6):
        parts.append(_grid_x(x(tick), height, fmt.change(tick)))
    parts.append(
        f'<line class="unity" x1="{x(1):.1f}" x2="{x(1):.1f}" y1="{_PAD_TOP}" '
        f'y2="{height - _PAD_BOTTOM}"/>'
    )
    for row, r in enumerate(rows):
        mid = _PAD_TOP + row_h * row + row_h / 2
        ci = fmt.interval(r.ci_low, r.ci_high)
        tip = f"{r.label}: {r.verdict} {fmt.ratio(r.ratio)}, 95% CI {ci}"
        parts.append(_text(label_w - 8, mid + 4, r.label, "label case", "end"))
        parts.append(
            f'<g class="ratio {r.verdict.lower()}"><title>{escape(tip)}</title>'
            f'<line x1="{x(r.ci_low):.1f}" x2="{x(r.ci_high):.1f}" y1="{mid:.1f}" y2="{mid:.1f}"/>'
            f'<circle cx="{x(r.ratio):.1f}" cy="{mid:.1f}" r="4"/></g>'
        )
    return "".join(parts) + "</svg>"


def _frame(height: int, kind: str) -> str:
    return (
        f'<svg class="chart {kind}" xmlns="http://www.w3.org/2000/svg" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}">'
    )


def _y_axis(
    low: float, high: float, y: Callable[[float], float], label: Callable[[float], str]
) -> str:
    parts = []
    for tick in nice_ticks(low, high, 4):
        parts.append(
            f'<line class="grid" x1="{_PAD_LEFT}" x2="{WIDTH - _PAD_RIGHT}" '
            f'y1="{y(tick):.1f}" y2="{y(tick):.1f}"/>'
        )
        parts.append(_text(_PAD_LEFT - 6, y(tick) + 4, label(tick), "tick y", "end"))
    return "".join(parts)


def _grid_x(position: float, height: int, label: str) -> str:
    return (
        f'<line class="grid" x1="{position:.1f}" x2="{position:.1f}" y1="{_PAD_TOP}" '
        f'y2="{height - _PAD_BOTTOM}"/>' + _text(position, height - 10, label, "tick x", "middle")
    )


def _text(x: float, y: float, text: str, cls: str, anchor: str) -> str:
    return (
        f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _path(points: Sequence[tuple[float, float]]) -> str:
    return " ".join(
        f"{'M' if i == 0 else 'L'}{px:.1f},{py:.1f}" for i, (px, py) in enumerate(points)
    )


def _linear(d0: float, d1: float, r0: float, r1: float) -> Callable[[float], float]:
    span = (d1 - d0) or 1.0
    return lambda v: r0 + (v - d0) / span * (r1 - r0)


def _padded(low: float, high: float) -> tuple[float, float]:
    # A flat series still gets a visible range; otherwise 8 % of the span either side.
    span = high - low
    pad = span * 0.08 if span > 0 else max(abs(high) * 0.02, 1e-9)
    return low - pad, high + pad


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2
