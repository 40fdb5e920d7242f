"""How numbers read in reports and PR comments: durations with a unit, ratios as a factor and
a signed percentage, shortened commit shas. ``-`` always stands for unknown."""

from __future__ import annotations

from datetime import UTC, datetime

MISSING = "-"
_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3))


def duration(ns: float | None) -> str:
    """A time in the largest unit that keeps it at or above 1: ``12.3 µs``, ``1.25 ms``."""
    if ns is None:
        return MISSING
    for unit, scale in _UNITS:
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def ratio(value: float | None) -> str:
    """A head/base ratio as a factor and a change: ``1.083x (+8.3%)``."""
    if value is None:
        return MISSING
    return f"{value:.3f}x ({change(value)})"


def change(value: float | None) -> str:
    """A ratio as a signed percentage change: ``+8.3%``."""
    if value is None:
        return MISSING
    return f"{(value - 1.0) * 100:+.1f}%"


def interval(low: float | None, high: float | None) -> str:
    """A ratio's confidence interval: ``[1.071, 1.095]``."""
    if low is None or high is None:
        return MISSING
    return f"[{low:.3f}, {high:.3f}]"


def percent(value: float | None, digits: int = 1) -> str:
    """A percentage already in percent units: ``62.5%``."""
    if value is None:
        return MISSING
    return f"{value:.{digits}f}%"


def number(value: float | None, spec: str = ".3g") -> str:
    """Any number, or ``-``."""
    return MISSING if value is None else format(value, spec)


def sha(value: str | None, length: int = 8) -> str:
    """A commit sha shortened for display."""
    return value[:length] if value else MISSING


def when(value: datetime | None) -> str:
    """A timestamp to the minute, in UTC: ``2026-06-01 03:00 UTC``."""
    if value is None:
        return MISSING
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
