"""Triage rules for alerts, as pure functions the store and the CLI call: states and the
moves between them, auto-closing when a series recovers, and baseline resets.

States: an alert opens ``untriaged``; people move it to ``acknowledged`` or
``investigating`` and close it as ``fixed``, ``wont_fix``, ``false_positive`` or
``hardware_issue`` (infrastructure, not code). A closed alert can be reopened (back to
``untriaged``) when the closing was wrong; nothing else leaves a closed state, so a
history of decisions is never rewritten silently.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from kernelwatch.analysis.changepoints import ChangePoint

State = Literal[
    "untriaged",
    "acknowledged",
    "investigating",
    "fixed",
    "wont_fix",
    "false_positive",
    "hardware_issue",
]
OPEN: frozenset[State] = frozenset({"untriaged", "acknowledged", "investigating"})
CLOSED: frozenset[State] = frozenset({"fixed", "wont_fix", "false_positive", "hardware_issue"})
#: ``--state`` filters beyond the states themselves.
STATE_FILTERS = ("open", "closed", "all")
ALLOWED: dict[State, frozenset[State]] = {
    "untriaged": frozenset({"acknowledged", "investigating"}) | CLOSED,
    "acknowledged": frozenset({"investigating"}) | CLOSED,
    "investigating": frozenset({"acknowledged"}) | CLOSED,
    **{closed: frozenset({"untriaged"}) for closed in CLOSED},
}


#: Latest points whose level says a series is back, when no change point says so.
RECENT_POINTS = 6


class TriageError(ValueError):
    """A move the rules do not allow."""


@dataclass(frozen=True)
class Triage:
    """The triage record of one alert. ``notes`` are appended, never replaced."""

    state: State = "untriaged"
    assignee: str | None = None
    bug: str | None = None
    notes: tuple[str, ...] = ()


def move(
    triage: Triage,
    to: State,
    note: str | None = None,
    assignee: str | None = None,
    bug: str | None = None,
) -> Triage:
    """The record after moving to ``to``, with an optional note, assignee and bug link.

    Raises TriageError, naming the allowed moves, when the rules forbid it.
    """
    if to not in ALLOWED:
        raise TriageError(f"unknown state {to!r}; use one of {sorted(ALLOWED)}")
    if to not in ALLOWED[triage.state]:
        raise TriageError(
            f"cannot move an alert from {triage.state} to {to}; "
            f"allowed: {', '.join(sorted(ALLOWED[triage.state]))}"
        )
    return replace(
        triage,
        state=to,
        assignee=assignee if assignee is not None else triage.assignee,
        bug=bug if bug is not None else triage.bug,
        notes=triage.notes + ((note,) if note else ()),
    )


def recovery_index(
    y: Sequence[float] | np.ndarray,
    change: ChangePoint,
    later: Sequence[ChangePoint],
    recent: int = RECENT_POINTS,
) -> int | None:
    """Where a series came back from ``change``: the first later change point after which
    the level is within half the change's size of the level before it; failing that, the
    start of its last ``recent`` points if their level is back; else None.

    Half the size, in log space, so a partial fix of a regression does not close it, while
    the small offsets of a real revert (different build, noise) still do. The recent-level
    check catches a return the detector did not call (a regime shorter than its window, or
    a p-value just above its cut): one series of a grouped alert missing it must not keep
    the whole alert open.
    """
    x = np.log(np.asarray(y, dtype=float))
    bounds = sorted(cp.index for cp in later if cp.index > change.index)
    previous = max((cp.index for cp in later if cp.index < change.index), default=0)
    baseline = float(np.nanmedian(x[previous : change.index]))
    tolerance = abs(math.log1p(change.magnitude_pct / 100.0)) / 2.0
    for start, end in zip(bounds, [*bounds[1:], x.size], strict=False):
        if abs(float(np.nanmedian(x[start:end])) - baseline) <= tolerance:
            return start
    tail = x.size - recent
    # recent = 0 asks for no recent-level check (a median of no points would be NaN).
    if (
        recent > 0
        and tail > change.index
        and abs(float(np.nanmedian(x[tail:])) - baseline) <= tolerance
    ):
        return tail
    return None


def auto_close(triage: Triage, recovered_at: int | None) -> Triage:
    """Close an open alert as fixed when its series recovered; anything else is unchanged."""
    if recovered_at is None or triage.state not in OPEN:
        return triage
    return move(triage, "fixed", note=f"auto: series recovered at point {recovered_at}")


def reset_baseline(triage: Triage, change_index: int, reset_at: int) -> Triage:
    """Apply an intended change (a baseline reset at point ``reset_at``) to an alert whose
    change is at ``change_index``: an open alert at or before the reset is part of the
    accepted level and closes as wont_fix; others are unchanged."""
    if triage.state not in OPEN or change_index > reset_at:
        return triage
    return move(triage, "wont_fix", note=f"intended change: baseline reset at point {reset_at}")
