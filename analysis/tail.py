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

from kernelwatch.analysis.confirm import rank_test, trim_slow_tail

#: A tail of this many points or more may hold one slow outlier when it is judged faster.
_OUTLIER_ALLOWED_FROM = 3
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
    it by ``rule``, or None. The reference is the points from ``regime_start`` (the first point
    of the current regime) up to the tail, at most ``rule.reference`` of them, without the
    indices in ``excluded`` (points already checked and found to be noise), its slow tail
    trimmed; a tail holds no excluded point (a point found to be noise is no change's first);
    ``sigma`` is the series' relative point-to-point noise."""
    n = x.size
    noise = max(sigma, _NOISE_FLOOR)
    for m in range(min(rule.max_points, n), rule.min_points - 1, -1):
        k = n - m
        if any(i >= k for i in excluded):
            continue
        before = [i for i in range(max(regime_start, 0), k) if i not in excluded]
        before = before[-rule.reference :]
        if len(before) < rule.min_reference:
            continue
        reference = trim_slow_tail(x[before])
        level = float(np.median(reference))
        tail = np.sort(x[k:])
        shift = float(np.median(tail)) - level
        if abs(shift) < rule.min_shift:
            continue
        if shift > 0:
            nearest = tail[0] - level
        else:
            nearest = level - tail[-2 if m >= _OUTLIER_ALLOWED_FROM else -1]
        z = nearest / noise
        if z < rule.z:
            continue
        effect, _ = rank_test(reference, x[k:])
        p = NormalDist().cdf(-z) ** m
        return TailShift(k, m, shift, float(z), noise, p, effect, level, int(reference.size))
    return None


def tail_magnitude_pct(found: TailShift, lower_is_better: bool = True) -> float:
    """The tail's change of level in the values' own units, signed, in percent."""
    return math.expm1(found.shift if lower_is_better else -found.shift) * 100.0
