"""A change in the newest points of a series, judged as soon as they land: the newest point(s)
against the median and noise of the points before them.

The change-point scan needs ``min_size`` points after a change and a rank test over a window,
so it reports a step only once enough nights follow it. The newest points can say more, sooner:
a step moves *every* point after it, so the point of the tail nearest the old level must itself
lie several noise sigmas beyond it. GPU noise is one-sided (interference, throttling only ever
add time), so for a slowdown that nearest point is the tail's fastest, which an outlier cannot
move; for a speed-up one slow outlier is allowed in a tail of three or more.

Two callers: ``kernelwatch detect`` reports such a change as provisional (``changepoints.py``,
two points at least: one point alone looks like an interference outlier), and the nightly
suspects one from a single point and checks it by A/B the same night (``suspicion.py``).
All values are "badness" (log time, or minus log rate): larger is slower.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from kernelwatch.analysis.shift_test import rank_test, sorted_median, trim_slow_tail

#: A tail of this many points or more may hold one slow outlier when it is judged faster.
_OUTLIER_ALLOWED_FROM = 3
#: A tail of ``m`` points may hold at most ``m // _DIPS_PER`` dips (``TailRule.dips``): more,
#: and a few far points at its end would carry a long tail of unmoved ones, placing the
#: change long before it happened.
_DIPS_PER = 4
#: The smallest noise a tail is judged against, relative: a few identical points would
#: otherwise make any difference infinitely many sigmas.
_NOISE_FLOOR = 1e-4


@dataclass(frozen=True)
class TailRule:
    """What a tail must clear: ``z`` noise sigmas on its nearest point, a level shift of at
    least ``min_shift`` (log), tails of ``min_points``..``max_points`` newest points, and a
    reference of ``min_reference``..``reference`` points before the tail."""

    z: float
    min_shift: float
    min_points: int
    max_points: int
    min_reference: int
    reference: int
    dips: bool = False
    """Let some of a longer tail's points dip back toward the old level: a tail of ``m``
    points counts when its ``j``-th nearest point lies so far beyond that ``m - j`` of ``m``
    points of unchanged noise would do so no more often than ``min_points`` points all
    ``z`` sigmas beyond (a binomial tail). Without it a tail's every point (a faster tail of
    three or more: all but one slow outlier) must lie ``z`` sigmas beyond, so the longer a
    step has stood, the likelier one noise dip hides it."""


@dataclass(frozen=True)
class TailShift:
    """A change in the newest ``points`` values, starting at index ``start``. ``shift`` is
    log(median of the tail / median of the reference); ``z`` is how many sigmas (``sigma``,
    log) the tail's point nearest the old level lies beyond it; ``p_value`` is the chance that
    ``points`` points of unchanged normal noise all lie that far; ``effect`` Cliff's delta of
    the tail against the reference; ``level`` the reference's median and ``reference`` the
    number of points it was judged against."""

    start: int
    points: int
    shift: float
    z: float
    sigma: float
    p_value: float
    effect: float
    level: float
    reference: int

    @property
    def direction(self) -> str:
        """``regression`` (slower) or ``improvement``."""
        return "regression" if self.shift > 0 else "improvement"


def tail_shift(
    x: np.ndarray,
    rule: TailRule,
    sigma: float,
    regime_start: int = 0,
    excluded: Collection[int] = (),
) -> TailShift | None:
    """The longest tail of ``x`` (badness values in order) that lies beyond the points before
    it by ``rule`` (with ``rule.dips``, the passing tail whose start splits best), or None.
    The reference is the points from ``regime_start`` (the first point of the current
    regime) up to the tail, at most ``rule.reference`` of them, without the indices in
    ``excluded`` (points already checked and found to be noise), its slow tail trimmed; a
    tail holds no excluded point (a point found to be noise is no change's first); ``sigma``
    is the series' relative point-to-point noise."""
    n = x.size
    noise = max(sigma, _NOISE_FLOOR)
    found: list[tuple[float, TailShift]] = []
    for m in range(min(rule.max_points, n), rule.min_points - 1, -1):
        k = n - m
        if any(i >= k for i in excluded):
            continue
        before = [i for i in range(max(regime_start, 0), k) if i not in excluded]
        before = before[-rule.reference :]
        if len(before) < rule.min_reference:
            continue
        reference = trim_slow_tail(x[before])
        level = sorted_median(np.sort(reference))
        tail = np.sort(x[k:])
        shift = sorted_median(tail) - level
        if abs(shift) < rule.min_shift:
            continue
        distances = (tail - level) if shift > 0 else (level - tail[::-1])
        if rule.dips and (x[k] - level) * math.copysign(1.0, shift) < abs(shift) / 2:
            # Dips are allowed inside a tail, never as its first point: a step starts with
            # the first point that moved, so a tail reaching back before it would be placed
            # early.
            continue
        if rule.dips:
            # A faster tail may hold one slow outlier, as without dips: a tail too short for
            # a dip (``_DIPS_PER``) is judged without its slowest point; a longer one counts
            # the outlier as its dip.
            skip = 1 if shift < 0 and _OUTLIER_ALLOWED_FROM <= m < _DIPS_PER else 0
            judged = _with_dips(distances[skip:] / noise, rule)
            if judged is None:
                continue
            z, p = judged
        else:
            z = distances[1 if shift < 0 and m >= _OUTLIER_ALLOWED_FROM else 0] / noise
            if z < rule.z:
                continue
            p = NormalDist().cdf(-z) ** m
        effect, _ = rank_test(reference, x[k:])
        shifted = TailShift(k, m, shift, float(z), noise, p, effect, level, int(reference.size))
        if not rule.dips:
            return shifted
        # Of the tails that pass, the one whose start splits best: the mean shift times
        # sqrt(points) peaks where the step is (a longer tail dilutes the mean with unmoved
        # points, a shorter one has fewer points), where the median would hold on to an
        # earlier start for up to twice the step's age.
        found.append((abs(float(x[k:].sum()) / m - level) * math.sqrt(m), shifted))
    return max(found, key=lambda f: f[0])[1] if found else None


def _with_dips(z: np.ndarray, rule: TailRule) -> tuple[float, float] | None:
    """The z and p-value of the tail whose points lie ``z`` sigmas beyond the old level
    (nearest first), judged on the ``j``-th nearest (``j`` up to a quarter of the tail) for
    the ``j`` that gives the smallest p-value: the chance that at least ``m - j`` of ``m``
    points of unchanged noise lie that far. None unless that is at most the chance of
    ``min_points`` points all ``rule.z`` sigmas beyond."""
    m = z.size
    cut = NormalDist().cdf(-rule.z) ** rule.min_points
    best: tuple[float, float] | None = None
    for j in range(0, min(m - rule.min_points, m // _DIPS_PER) + 1):
        if z[j] <= 0:
            continue
        q = NormalDist().cdf(-float(z[j]))
        p = sum(math.comb(m, i) * q**i * (1 - q) ** (m - i) for i in range(m - j, m + 1))
        if p <= cut and (best is None or p < best[1]):
            best = (float(z[j]), p)
    return best


def tail_magnitude_pct(found: TailShift, lower_is_better: bool = True) -> float:
    """The tail's change of level in the values' own units, signed, in percent."""
    return math.expm1(found.shift if lower_is_better else -found.shift) * 100.0
