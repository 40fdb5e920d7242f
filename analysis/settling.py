"""Settling a PR check's inconclusive cases before it answers (issue 48, item 3).

A case whose first A/B is AMBIGUOUS has no verdict: "none slower" above it would read as one.
Its kernel is timed again with twice the samples of the round before (as bisection does),
within a device-time budget and a number of rounds, until its verdict is SAME, SLOWER or
FASTER. Kernels go most affected first: those with a static change, then by how far their
ambiguous cases' ratios are from 1. A kernel whose next round would take the spent time past
the budget is not timed again; its cases stay AMBIGUOUS and are said to be left for want of
budget, the others for want of rounds.

Pure: the measuring is the caller's (``measure(kernels, round_)`` times every case of those
kernels with round ``round_``'s samples and returns the pairs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.verdict import ABVerdict, compare_measurements
from kernelwatch.harness.records import ABMeasurement, CaseId

Measure = Callable[[tuple[str, ...], int], Sequence[ABMeasurement]]


@dataclass(frozen=True)
class Settled:
    """The pairs to report (each case's latest round), and what settling did."""

    pairs: tuple[ABMeasurement, ...]
    rounds: int
    device_s: float
    resolved: tuple[str, ...]
    """Cases an extra round took out of AMBIGUOUS."""
    out_of_rounds: tuple[str, ...]
    """Cases still AMBIGUOUS after the last round allowed."""
    out_of_budget: tuple[str, ...]
    """Cases still AMBIGUOUS whose next round the budget did not allow."""

    @property
    def unsettled(self) -> tuple[str, ...]:
        """Every case still AMBIGUOUS."""
        return (*self.out_of_rounds, *self.out_of_budget)

    def notes(self) -> tuple[str, ...]:
        """What a reader of the verdict needs to know of it, one line each."""
        if not self.rounds and not self.out_of_budget:
            return ()
        lines = []
        if self.rounds:
            lines.append(
                f"{len(self.resolved)} of the inconclusive cases settled by up to {self.rounds} "
                f"round(s) with twice the samples ({self.device_s:.1f} s of device time)"
            )
        if self.out_of_rounds:
            lines.append(
                f"still inconclusive after the last round: {', '.join(self.out_of_rounds)}"
            )
        if self.out_of_budget:
            lines.append(
                "left inconclusive by the device-time budget ([pr] device_seconds): "
                + ", ".join(self.out_of_budget)
            )
        return tuple(lines)


def case_name(case: CaseId) -> str:
    """How the headline names a case."""
    return f"{case.kernel} {case.label()} {case.dtype}".replace("  ", " ")


def _key(case: CaseId) -> tuple[str, str, str, str]:
    return case.kernel, case.workload, case.label(), case.dtype


def verdict(pair: ABMeasurement, thresholds: Thresholds) -> ABVerdict | None:
    """The A/B verdict of a timed pair with its kernel's thresholds; None when not timed."""
    if pair.status != "ok" or pair.base is None or pair.head is None:
        return None
    return compare_measurements(
        pair.base, pair.head, thresholds.for_kernel(pair.case.kernel).verdict
    )


def settle(
    pairs: Sequence[ABMeasurement],
    measure: Measure,
    thresholds: Thresholds,
    budget_s: float,
    max_rounds: int,
    changed: Collection[str] = (),
) -> Settled:
    """``pairs`` with each AMBIGUOUS case timed again, round by round, while the rounds and
    ``budget_s`` device seconds allow; ``changed``: the kernels a static change touched,
    settled first."""
    current = {_key(p.case): p for p in pairs}
    first = {k for k, p in current.items() if _ambiguous(p, thresholds)}
    spent, rounds, left_by_budget = 0.0, 0, set()
    for round_ in range(1, max_rounds + 1):
        ambiguous = [p for p in current.values() if _ambiguous(p, thresholds)]
        if not ambiguous:
            break
        chosen, expected = [], 0.0
        for kernel in _order(ambiguous, thresholds, changed):
            # A round costs about twice the last: its samples and budget doubled.
            cost = 2 * sum(p.duration_s for p in current.values() if p.case.kernel == kernel)
            if spent + expected + cost <= budget_s:
                chosen.append(kernel)
                expected += cost
        left_by_budget = {_key(p.case) for p in ambiguous if p.case.kernel not in chosen}
        if not chosen:
            break
        fresh = measure(tuple(chosen), round_)
        rounds = round_
        spent += sum(p.duration_s for p in fresh)
        for pair in fresh:
            if _key(pair.case) in current:
                current[_key(pair.case)] = pair
    still = {k for k, p in current.items() if _ambiguous(p, thresholds)}
    names = {k: case_name(p.case) for k, p in current.items()}
    budget = still & left_by_budget
    return Settled(
        pairs=tuple(current[_key(p.case)] for p in pairs),
        rounds=rounds,
        device_s=spent,
        resolved=tuple(names[k] for k in current if k in first - still),
        out_of_rounds=tuple(names[k] for k in current if k in still - budget),
        out_of_budget=tuple(names[k] for k in current if k in budget),
    )


def _ambiguous(pair: ABMeasurement, thresholds: Thresholds) -> bool:
    found = verdict(pair, thresholds)
    return found is not None and found.verdict == "AMBIGUOUS"


def _order(
    ambiguous: Sequence[ABMeasurement], thresholds: Thresholds, changed: Collection[str]
) -> list[str]:
    """The kernels of the ambiguous cases, a static change first, then the farthest ratio."""
    distance: dict[str, float] = {}
    for pair in ambiguous:
        found = verdict(pair, thresholds)
        far = abs(math.log(found.ratio)) if found is not None and found.ratio > 0 else 0.0
        distance[pair.case.kernel] = max(distance.get(pair.case.kernel, 0.0), far)
    return sorted(distance, key=lambda k: (k not in changed, -distance[k], k))
