"""Confirmation of a candidate change: a rank test plus effect-size floors, in time and in
cycle space.

All comparisons work on log values, so shifts are relative and multiplicative noise is
additive. The rank test (Mann-Whitney) ignores how far an interference outlier or a throttled
point sits, only that it is slower; the effect floors keep a significant but irrelevant shift
(thousands of samples make any shift significant) from being reported.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

_SQRT2 = math.sqrt(2.0)
TRIM_K = 3.0


class SampledRun(Protocol):
    """What confirmation reads of a run: a ``Measurement`` record, or a run read back from
    the store. ``throttled`` and ``sm_clock_mhz`` are per sample, or empty when unknown."""

    @property
    def status(self) -> str: ...
    @property
    def samples_ns(self) -> Sequence[float]: ...
    @property
    def throttled(self) -> Sequence[bool]: ...
    @property
    def sm_clock_mhz(self) -> Sequence[float]: ...


@dataclass(frozen=True)
class Confirmation:
    """The evidence for a shift between ``before`` and ``after``.

    ``shift`` is log(median after / median before); ``effect`` is Cliff's delta in [-1, 1]
    (the probability that an after value is larger minus that it is smaller); ``p_value`` is
    the two-sided Mann-Whitney p-value.
    """

    shift: float
    effect: float
    p_value: float
    confirmed: bool

    @property
    def magnitude_pct(self) -> float:
        """The shift as a signed percentage of the before level."""
        return math.expm1(self.shift) * 100.0


@dataclass(frozen=True)
class Floors:
    """What a shift must clear to count: significance, relative size and rank effect."""

    alpha: float = 1e-3
    magnitude: float = 0.005
    effect: float = 0.3


def rank_test(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    """Cliff's delta and the two-sided Mann-Whitney p-value (normal approximation with
    continuity and tie corrections) of ``after`` against ``before``.

    Counts pairs directly, which for the window sizes the detector uses (tens of points) is
    faster than ranking, and exact about ties.
    """
    n1, n2 = before.size, after.size
    if n1 == 0 or n2 == 0:
        return 0.0, 1.0
    if n1 * n2 > 250_000:
        return _rank_test_sorted(before, after)
    diff = after[None, :] - before[:, None]
    greater = int(np.count_nonzero(diff > 0))
    less = int(np.count_nonzero(diff < 0))
    return _mann_whitney(greater, less, n1, n2, pooled=(before, after))


def _rank_test_sorted(before: np.ndarray, after: np.ndarray) -> tuple[float, float]:
    # Raw samples (thousands a side): count with a sort instead of an n1 x n2 matrix.
    ordered = np.sort(before)
    greater = int(np.searchsorted(ordered, after, side="left").sum())
    less = int(before.size * after.size - np.searchsorted(ordered, after, side="right").sum())
    return _mann_whitney(greater, less, before.size, after.size, (before, after))


def _mann_whitney(
    greater: int,
    less: int,
    n1: int,
    n2: int,
    pooled: tuple[np.ndarray, np.ndarray],
) -> tuple[float, float]:
    pairs = n1 * n2
    delta = (greater - less) / pairs
    n = n1 + n2
    variance = pairs * (n + 1) / 12.0
    # The tie correction counts ties in the pooled values: ties within one side shrink the
    # variance of U as much as ties across the sides, so no count of pairs can skip it.
    _, counts = np.unique(np.concatenate(pooled), return_counts=True)
    variance -= pairs * float(np.sum(counts**3 - counts)) / (12.0 * n * (n - 1))
    if variance <= 0:
        return delta, 1.0
    # U - n1 n2 / 2 = (greater - less) / 2; continuity correction of one half.
    z = max(abs(greater - less) / 2.0 - 0.5, 0.0) / math.sqrt(variance)
    return delta, math.erfc(z / _SQRT2)


def confirm_shift(before: np.ndarray, after: np.ndarray, floors: Floors) -> Confirmation:
    """Test log values ``after`` against ``before`` (consecutive points in order): confirmed
    when the rank test is significant and Cliff's delta and the shift of medians clear their
    floors, all in the same direction.

    The magnitude floor applies to the shift left once slow drift is taken out: on a quiet
    GPU a drift of a fraction of a percent over a window is highly significant to any rank
    test, and only its smoothness tells it from a step.
    """
    before, after = trim_slow_tail(before), trim_slow_tail(after)
    shift = _quantile(np.sort(after), 0.5) - _quantile(np.sort(before), 0.5)
    # A linear trend moves the medians of two runs of points apart by its slope times the
    # distance between their centres.
    step = shift - drift_slope(before, after) * (before.size + after.size) / 2.0
    effect, p = rank_test(before, after)
    confirmed = (
        p < floors.alpha
        and abs(effect) >= floors.effect
        and shift * effect > 0
        and step * shift > 0
        and abs(step) >= floors.magnitude
    )
    return Confirmation(shift, effect, p, confirmed)


def trim_slow_tail(values: np.ndarray, k: float = TRIM_K) -> np.ndarray:
    """Drop the points far on the slow side of a run: more than ``k`` lower-half sigmas
    above its median.

    GPU noise is one-sided: interference, throttling and a second autotune config only ever
    make a run slower, while the fast side is bounded by the hardware. Those points are not
    the level of the run, and on a quiet GPU they blur a 3 % step into overlapping ranks.
    The spread comes from the fast half (median minus the 15.9th percentile), which the slow
    tail cannot inflate. Symmetric noise loses almost nothing (0.1 % of points at k=3).
    """
    if values.size < 4:
        return values
    ordered = np.sort(values)
    median = _quantile(ordered, 0.5)
    spread = median - _quantile(ordered, 0.1587)
    if spread <= 0:
        return values
    return values[values <= median + k * spread]


def sorted_median(ordered: np.ndarray) -> float:
    """``np.median`` of an already sorted, non-empty array, to the last bit (the mean of the
    two middle values of an even count), without its overhead: the detector takes thousands
    of medians of a few dozen points per series."""
    mid = ordered.size // 2
    if ordered.size % 2:
        return float(ordered[mid])
    return float((ordered[mid - 1] + ordered[mid]) / 2.0)


def _quantile(ordered: np.ndarray, q: float) -> float:
    # np.quantile's default (linear) on an already sorted array: the detector calls this
    # thousands of times on a few dozen points, where np.median's overhead dominates.
    position = q * (ordered.size - 1)
    lo = int(position)
    hi = min(lo + 1, ordered.size - 1)
    return float(ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo))


def drift_slope(before: np.ndarray, after: np.ndarray) -> float:
    """The slope of a linear trend through two consecutive runs of points: Theil-Sen over
    pairs within each side, so a step between the sides does not bias it."""
    slopes = [_pair_slopes(side) for side in (before, after) if side.size >= 3]
    if not slopes:
        return 0.0
    return float(np.median(np.concatenate(slopes)))


def _pair_slopes(values: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(values.size, k=1)
    return (values[j] - values[i]) / (j - i)


def cycles(log_times: np.ndarray, clock_mhz: np.ndarray) -> np.ndarray:
    """Log cycles from log times (or minus log rates) and SM clocks: time x clock. A
    throttled GPU takes longer for the same cycles, so a change that vanishes here came from
    the clock, not the code."""
    return log_times + np.log(np.asarray(clock_mhz, dtype=float))


def counted_samples(measurement: SampledRun) -> tuple[np.ndarray, np.ndarray | None]:
    """The raw samples of a measurement that count (those flagged as throttled are left out,
    as the harness's summary does) and their SM clocks, or None where clocks were not read."""
    samples = np.asarray(measurement.samples_ns, dtype=float)
    keep = np.ones(samples.size, dtype=bool)
    if len(measurement.throttled) == samples.size:
        keep = ~np.asarray(measurement.throttled, dtype=bool)
    clocks = None
    if len(measurement.sm_clock_mhz) == samples.size:
        clocks = np.asarray(measurement.sm_clock_mhz, dtype=float)[keep]
    return samples[keep], clocks


def confirm_on_samples(
    before: Sequence[SampledRun], after: Sequence[SampledRun], floors: Floors
) -> tuple[Confirmation, Confirmation | None]:
    """Confirm a change on the raw samples of the runs either side of it, in time and, when
    every run recorded clocks, in cycle space (None otherwise).

    Samples within a run are correlated, so thousands of them make the rank test's p tiny
    for any shift: here the effect floors carry the decision.
    """
    sides = [[counted_samples(m) for m in runs] for runs in (before, after)]
    times = [np.log(np.concatenate([ns for ns, _ in side])) for side in sides]
    in_time = confirm_shift(times[0], times[1], floors)
    if any(clock is None for side in sides for _, clock in side):
        return in_time, None
    in_cycles = [
        cycles(t, np.concatenate([clock for _, clock in side]))  # type: ignore[misc]
        for t, side in zip(times, sides, strict=True)
    ]
    return in_time, confirm_shift(in_cycles[0], in_cycles[1], floors)
