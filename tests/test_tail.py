"""The test of a series' newest points against its regime (``analysis/tail.py``), on small
hand-made series whose medians, shifts and sigmas are exact binary fractions, so every field
of the result is known exactly: the tail and its start, the reference window and its start,
the nearest point's z, the shift floor, the outlier a faster tail may hold, and the p-value.
Values are badness (log time, or minus log rate): larger is slower."""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np
import pytest

from kernelwatch.analysis.tail import TailRule, TailShift, tail_magnitude_pct, tail_shift

#: Three sigmas, a shift of at least 0.25, tails of 2..3 points against 3..10 points before.
RULE = TailRule(z=3.0, min_shift=0.25, min_points=2, max_points=3, min_reference=3, reference=10)
#: The series' noise. Each reference here has no lower-half spread, so trimming keeps it whole.
SIGMA = 0.125


def _series(*values: float) -> np.ndarray:
    return np.array(values, dtype=float)


def _rule(**changes: float) -> TailRule:
    return dataclasses.replace(RULE, **changes)


def test_a_slower_tail_is_reported_with_every_field_exact():
    # The three-point tail (0, 0.5, 0.5) starts at the old level, so only two points moved.
    x = _series(0, 0, 0, 0, 0.5, 0.5)
    found = tail_shift(x, RULE, SIGMA)
    assert found == TailShift(
        start=4,
        points=2,
        shift=0.5,
        z=4.0,
        sigma=SIGMA,
        p_value=NormalDist().cdf(-4.0) ** 2,
        effect=1.0,
        level=0.0,
        reference=4,
    )
    assert found.direction == "regression"


def test_p_value_is_the_chance_that_every_tail_point_lies_that_far():
    found = tail_shift(_series(0, 0, 0, 0, 0.5, 0.5, 0.5), RULE, SIGMA)
    assert (found.points, found.z) == (3, 4.0)
    assert found.p_value == pytest.approx(NormalDist().cdf(-4.0) ** 3, rel=1e-12)
    assert 0.0 < found.p_value < NormalDist().cdf(-4.0)


def test_a_faster_tail_of_two_is_judged_on_its_slower_point():
    found = tail_shift(_series(1, 1, 1, 1, 0.25, 0), _rule(max_points=2), SIGMA)
    assert (found.start, found.points, found.shift, found.level) == (4, 2, -0.875, 1.0)
    assert found.z == 0.75 / SIGMA
    assert found.direction == "improvement"


def test_a_tail_of_two_may_not_hold_a_slow_outlier():
    # One point alone 8 sigmas faster, the other near the old level: no change.
    assert tail_shift(_series(1, 1, 1, 1, 0, 0.9), _rule(max_points=2), SIGMA) is None


@pytest.mark.parametrize(
    ("tail", "median"),
    [((0, 0.9, 0.125), 0.125), ((0, 0.9, 0.125, 0.0625), 0.09375)],
)
def test_a_faster_tail_of_three_or_more_may_hold_one_slow_outlier(tail, median):
    x = _series(1, 1, 1, 1, 1, *tail)
    found = tail_shift(x, _rule(max_points=4), SIGMA)
    # Judged on its second slowest point (0.125), not the outlier (0.9) nor its fastest (0).
    assert (found.start, found.points) == (5, len(tail))
    assert (found.shift, found.z) == (median - 1.0, 0.875 / SIGMA)


def test_with_dips_a_faster_tail_of_three_may_still_hold_one_slow_outlier():
    """Issue 47: the dips rule judged a faster tail on its every point, so a 5-sigma speed-up
    three nights old was missed whenever one of its points was an interference outlier
    (allowing one found 13 of the 22 missed at lag 3 on the delay curve's seed 3). Judged on
    the rest, as without dips."""
    x = _series(*[1.0] * 10, 0.0, 0.125, 1.5)
    found = tail_shift(x, dataclasses.replace(DIPS, max_points=3), SIGMA)
    assert (found.start, found.points, found.z) == (10, 3, 0.875 / SIGMA)
    # A slower tail holds no such outlier (a fast point is no interference), and a tail of two
    # holds none either way.
    assert tail_shift(2.0 - x, dataclasses.replace(DIPS, max_points=3), SIGMA) is None
    assert tail_shift(x, dataclasses.replace(DIPS, max_points=2), SIGMA) is None


def test_a_faster_tail_with_two_slow_points_is_no_change():
    x = _series(1, 1, 1, 1, 1, 0, 0, 0.9, 0.9)
    assert tail_shift(x, _rule(max_points=4), SIGMA) is None


def test_the_longest_qualifying_tail_wins_and_never_one_under_min_points():
    x = _series(0, 0, 0, 0, 0, 0.5, 0.5, 0.5)
    assert tail_shift(x, RULE, SIGMA).points == 3
    assert tail_shift(x, _rule(max_points=2), SIGMA).points == 2
    # Only the two newest points moved: a rule that wants three finds nothing.
    assert tail_shift(x[:-1], _rule(min_points=3), SIGMA) is None
    assert tail_shift(x[:-1], _rule(min_points=2), SIGMA).points == 2


def test_a_shift_of_exactly_min_shift_counts_and_one_just_under_does_not():
    x = _series(0, 0, 0, 0, 0.5, 0.5)
    sigma = 0.0625  # 8 sigmas: only the shift floor decides
    assert tail_shift(x, _rule(min_shift=0.5), sigma).shift == 0.5
    assert tail_shift(x, _rule(min_shift=0.5000001), sigma) is None
    faster = _series(1, 1, 1, 1, 0.5, 0.5)
    assert tail_shift(faster, _rule(min_shift=0.5), sigma).shift == -0.5
    assert tail_shift(faster, _rule(min_shift=0.5000001), sigma) is None


def test_a_nearest_point_exactly_z_sigmas_away_counts_and_one_just_under_does_not():
    x = _series(0, 0, 0, 0, 0.5, 0.5)
    assert tail_shift(x, _rule(z=4.0), SIGMA).z == 4.0
    assert tail_shift(x, _rule(z=4.0000001), SIGMA) is None


def test_a_reference_of_exactly_min_reference_points_counts():
    x = _series(0, 0, 0, 0.5, 0.5)
    found = tail_shift(x, RULE, SIGMA)
    # The three-point tail has two points before it, too few; the two-point tail has three.
    assert (found.start, found.points, found.reference) == (3, 2, 3)
    assert tail_shift(x, _rule(min_reference=4), SIGMA) is None


def test_the_reference_is_the_newest_points_before_the_tail_at_most_reference_of_them():
    x = _series(2, 2, 2, 2, 0, 0, 0, 0, 0.5, 0.5)
    found = tail_shift(x, _rule(reference=4, max_points=2), SIGMA)
    assert (found.level, found.reference, found.shift) == (0.0, 4, 0.5)


def test_the_reference_starts_at_the_regime_start():
    x = _series(0.25, 0, 0, 0, 0.5, 0.5)
    assert tail_shift(x, RULE, SIGMA).reference == 4
    assert tail_shift(x, RULE, SIGMA, regime_start=0).reference == 4
    assert tail_shift(x, RULE, SIGMA, regime_start=1).reference == 3
    assert tail_shift(x, RULE, SIGMA, regime_start=2) is None
    # A regime start before the series is its first point, never an index from its end.
    assert tail_shift(x, RULE, SIGMA, regime_start=-1) == tail_shift(x, RULE, SIGMA)


def test_excluded_points_leave_the_reference_and_no_tail_starts_at_or_holds_one():
    x = _series(0, 0.125, 0, 0, 0, 0.5, 0.5, 0.5)
    assert tail_shift(x, RULE, SIGMA).reference == 5
    assert tail_shift(x, RULE, SIGMA, excluded={1}).reference == 4
    # The first point of the longest tail was noise: the change starts after it.
    found = tail_shift(x, RULE, SIGMA, excluded={5})
    assert (found.start, found.points, found.reference) == (6, 2, 5)
    # Tonight's point was noise: every tail holds it.
    assert tail_shift(x, RULE, SIGMA, excluded={7}) is None
    assert tail_shift(x, RULE, SIGMA, excluded={6}) is None


def test_identical_points_are_judged_against_a_noise_floor():
    x = _series(0, 0, 0, 0, 0.5, 0.5)
    for sigma in (0.0, 1e-12):
        found = tail_shift(x, RULE, sigma)
        assert 0.0 < found.sigma < 0.01
        assert math.isfinite(found.z)
        assert found.z == pytest.approx(0.5 / found.sigma)
    assert tail_shift(x, RULE, SIGMA).sigma == SIGMA


@pytest.mark.parametrize(
    ("values", "lower_is_better", "direction", "pct"),
    [
        ((1.0, 1.0, 1.0, 1.0, 1.25, 1.25), True, "regression", 25.0),
        ((1.0, 1.0, 1.0, 1.0, 0.8, 0.8), True, "improvement", -20.0),
        ((100.0, 100.0, 100.0, 100.0, 80.0, 80.0), False, "regression", -20.0),
        ((100.0, 100.0, 100.0, 100.0, 125.0, 125.0), False, "improvement", 25.0),
    ],
)
def test_magnitude_is_the_change_in_the_values_own_units(values, lower_is_better, direction, pct):
    # Times are badness as log time, rates as minus log rate.
    x = np.log(values) * (1.0 if lower_is_better else -1.0)
    found = tail_shift(x, _rule(min_shift=0.1), 0.01)
    assert found.direction == direction
    assert tail_magnitude_pct(found, lower_is_better) == pytest.approx(pct, rel=1e-12)


def test_magnitude_defaults_to_times():
    found = tail_shift(np.log(_series(1, 1, 1, 1, 1.25, 1.25)), _rule(min_shift=0.1), 0.01)
    assert tail_magnitude_pct(found) == pytest.approx(25.0, rel=1e-12)


def test_a_found_shift_is_a_value_that_cannot_be_changed():
    found = tail_shift(_series(0, 0, 0, 0, 0.5, 0.5), RULE, SIGMA)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.shift = 0.0


#: The rule of ``detect``'s provisional tail: tails up to 8 points, noise dips allowed.
DIPS = _rule(max_points=8, dips=True)


def test_with_dips_a_tail_may_hold_a_point_that_fell_back_toward_the_old_level():
    """Issue 31: the longer a step stands, the likelier one noise dip. Without dips every
    point must lie 3 sigmas beyond, so the step is placed after the dip, 4 points late."""
    x = _series(*[0.0] * 10, 0.75, 0.75, 0.75, 0.125, 0.75, 0.75, 0.75, 0.75)
    assert tail_shift(x, _rule(max_points=8), SIGMA).start == 14
    found = tail_shift(x, DIPS, SIGMA)
    assert (found.start, found.points) == (10, 8)
    # Judged on its second nearest point (6 sigmas, the dip left out): the chance that 7 of
    # 8 points of unchanged noise lie that far.
    q = NormalDist().cdf(-6.0)
    assert found.z == 6.0
    assert found.p_value == pytest.approx(8 * q**7 * (1 - q) + q**8, rel=1e-9)


def test_with_dips_a_tail_starts_at_its_first_moved_point():
    """A tail reaching back before the step, its unmoved points counted as dips, would place
    the change early; the tail starts at the first point that moved."""
    x = _series(*[0.0] * 10, 0.75, 0.75, 0.75, 0.75)
    assert tail_shift(x, DIPS, SIGMA).start == 10


def test_with_dips_a_few_far_points_do_not_carry_a_long_unmoved_tail():
    """At most a quarter of a tail may dip: two far points at the end of eight do not make a
    change of the six unmoved ones before them (they would, one point each for ``m // j``)."""
    x = _series(*[0.0] * 10, 0.25, 0.0, 0.0, 0.0, 0.0, 0.25, 0.75, 0.75)
    found = tail_shift(x, DIPS, SIGMA)
    assert found is not None and found.start == 16


#: A dips rule: 4 sigmas, tails of 2..20 points against up to 30 before them.
_DIPS = TailRule(
    z=4.0, min_shift=0.01, min_points=2, max_points=20, min_reference=5, reference=30, dips=True
)


def test_a_tail_with_dips_is_judged_on_the_binomial_tail_of_its_best_point():
    """``_with_dips`` against scipy's binomial: for each ``j`` up to a quarter of the tail,
    the chance that at least ``m - j`` of ``m`` noise points lie ``z[j]`` sigmas out; the
    smallest that clears the cut of ``min_points`` points all ``z`` sigmas out wins."""
    from scipy.stats import binom

    from kernelwatch.analysis.tail import _with_dips

    def expected(z: np.ndarray, rule: TailRule) -> tuple[float, float] | None:
        m, cut = z.size, NormalDist().cdf(-rule.z) ** rule.min_points
        options = [
            (float(z[j]), float(binom.sf(m - j - 1, m, NormalDist().cdf(-float(z[j])))))
            for j in range(min(m - rule.min_points, m // 4) + 1)
            if z[j] > 0
        ]
        passing = [o for o in options if o[1] <= cut]
        return min(passing, key=lambda o: o[1]) if passing else None

    for z in (
        [1.0, 3.5, 3.6, 3.8, 4.0, 4.2, 5.0, 6.0],  # the second-nearest point decides
        [2.5, 2.9, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6, 3.7, 3.8, 3.9],  # a longer tail's reach
        [4.5, 4.6],  # every point out: j = 0
        [-1.0, 5.0, 5.0, 5.0, 5.0],  # a point on the wrong side is never the judged one
        [0.5, 1.0, 1.5, 2.0],  # nothing clears the cut
    ):
        values = np.array(z)
        got, want = _with_dips(values, _DIPS), expected(values, _DIPS)
        if want is None:
            assert got is None, (z, got)
        else:
            assert got is not None and got[0] == want[0], (z, got, want)
            assert math.isclose(got[1], want[1], rel_tol=1e-9), (z, got, want)


def _stepped(level: float, tail: list[float]) -> np.ndarray:
    """Twenty points at ``level`` (+-0.1 % jitter), then ``tail`` above it."""
    jitter = np.tile([0.001, -0.001], 10)
    return np.concatenate([level + jitter, level + np.array(tail)])


@pytest.mark.parametrize("level", [0.0, 1.0])
def test_a_dipped_tail_starts_where_its_first_point_moved_half_the_step(level):
    """A tail's first point must lie at least half the step beyond the old level (a point
    0.495 of the way is not its start, though a longer tail would score higher with it); a
    dip inside a tail is allowed, and of the tails that pass the one whose mean shift times
    sqrt(points) is largest is the change."""
    step = 0.3
    half_moved = _stepped(level, [0.495 * step] + [step] * 15)
    found = tail_shift(half_moved, _DIPS, sigma=0.001)
    assert found is not None and found.start == 21, found
    moved = _stepped(level, [0.6 * step] + [step] * 15)
    assert tail_shift(moved, _DIPS, sigma=0.001).start == 20
    # A dip right after a partly moved point: the longest passing tail (from 20) is not the
    # best split; the clean one from 22 is.
    dipped = _stepped(level, [0.6 * step, 0.2 * step] + [step] * 14)
    assert tail_shift(dipped, _DIPS, sigma=0.001).start == 22
