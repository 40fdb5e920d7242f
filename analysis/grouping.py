"""One alert per culprit: change points in many series (shapes, dtypes, GPUs) whose commit
ranges overlap become one alert naming the narrowest range they share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kernelwatch.analysis.changepoints import ChangePoint, Direction


@dataclass(frozen=True)
class Regression:
    """One change point of one series, placed in the repository's commit order: the culprit
    lies in ``(last_good, first_bad]`` (positions in commit order, so a range can span
    commits that were never measured)."""

    series: str
    last_good: int
    first_bad: int
    direction: Direction
    magnitude_pct: float


@dataclass(frozen=True)
class Alert:
    """A group of changes that one commit range explains: the culprit is in
    ``(after, until]`` of commit order."""

    direction: Direction
    after: int
    until: int
    series: tuple[str, ...]
    worst_magnitude_pct: float


def place(series: str, change: ChangePoint, positions: Sequence[int], slack: int = 2) -> Regression:
    """Put a series' change point on the commit order. ``positions`` holds the commit-order
    position of each point of the series; ``slack`` widens the range by that many points
    either side, since a change located from noisy points can be a point or two off."""
    i = change.index
    if not 0 < i < len(positions):
        raise ValueError(f"change index {i} is outside the series' {len(positions)} points")
    last_good = positions[max(0, i - 1 - slack)]
    first_bad = positions[min(len(positions) - 1, i + slack)]
    return Regression(series, last_good, first_bad, change.direction, change.magnitude_pct)


def group(regressions: Sequence[Regression]) -> list[Alert]:
    """One alert per set of changes whose commit ranges overlap, per direction.

    Ranges that overlap, directly or through a chain of others, form one group: a change
    located a point or two off still joins its culprit's group, where strict intersection
    would split it off. The alert names the likeliest culprit range (the medians of its
    members' range ends) and the worst change among its members.
    """
    alerts = []
    for direction in ("regression", "improvement"):
        pending = sorted(
            (r for r in regressions if r.direction == direction), key=lambda r: r.last_good
        )
        members: list[Regression] = []
        for r in pending:
            if members and r.last_good >= max(m.first_bad for m in members):
                alerts.append(_alert(members))
                members = []
            members.append(r)
        if members:
            alerts.append(_alert(members))
    return sorted(alerts, key=lambda a: (a.until, a.direction))


def _alert(members: list[Regression]) -> Alert:
    # Medians of the range ends: one member located a few commits off (a burst or a flip
    # next to the step) cannot drag the named range away from where the majority agrees.
    after = int(np.median([m.last_good for m in members]))
    until = int(np.ceil(np.median([m.first_bad for m in members])))
    if after >= until:
        after, until = min(m.last_good for m in members), max(m.first_bad for m in members)
    return Alert(
        direction=members[0].direction,
        after=after,
        until=until,
        series=tuple(sorted({m.series for m in members})),
        worst_magnitude_pct=max((m.magnitude_pct for m in members), key=abs),
    )
