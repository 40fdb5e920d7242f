"""Confirmation of a change (``analysis/shift_test.py``): the rank test against scipy's
Mann-Whitney, Cliff's delta, the drift-corrected step and its floors, the slow-tail trim and
which raw samples count. Pure and fast: no store, no flows."""

from __future__ import annotations

import dataclasses
import math
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from kernelwatch.analysis.shift_test import (
    Confirmation,
    Floors,
    confirm_on_samples,
    confirm_shift,
    counted_samples,
    drift_slope,
    rank_test,
    sorted_median,
    trim_slow_tail,
)

_RNG = np.random.default_rng(7)
# Each pair is (before, after). Integer-valued draws tie across and within the sides; the
# 600 x 500 cases (300 000 pairs) take the sorted path, the others the pair matrix.
RANK_CASES = {
    "small, no ties": (_RNG.normal(0.0, 1.0, 12), _RNG.normal(0.8, 1.0, 15)),
    "small, ties across and within": (
        _RNG.integers(0, 6, 14).astype(float),
        _RNG.integers(1, 7, 11).astype(float),
    ),
    "ties only within each side": (np.array([1.0, 1.0, 1.0, 2.0]), np.array([3.0, 3.0, 3.0, 4.0])),
    "one tie across, none within": (np.array([1.0, 2.0, 3.0, 4.0]), np.array([4.0, 5.0, 6.0])),
    "balanced": (np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])),
    "large, no ties": (_RNG.normal(0.0, 1.0, 600), _RNG.normal(0.1, 1.0, 500)),
    "large, ties": (
        _RNG.integers(0, 40, 600).astype(float),
        _RNG.integers(2, 42, 500).astype(float),
    ),
}


def _cliffs_delta(before: np.ndarray, after: np.ndarray) -> float:
    return float(np.sign(after[None, :] - before[:, None]).mean())


@pytest.mark.parametrize("case", RANK_CASES, ids=str)
def test_rank_test_is_scipys_two_sided_mann_whitney_with_continuity_and_tie_corrections(case):
    before, after = RANK_CASES[case]
    effect, p = rank_test(before, after)
    expected = mannwhitneyu(after, before, alternative="two-sided", method="asymptotic").pvalue
    assert p == pytest.approx(expected, rel=1e-9)
    assert effect == pytest.approx(_cliffs_delta(before, after), rel=1e-12)


@pytest.mark.parametrize("repeat", [1, 150], ids=["pair matrix", "sorted"])
def test_cliffs_delta_counts_a_tie_as_neither_larger_nor_smaller(repeat):
    # 9 pairs: 6 where after is larger, 1 smaller, 2 tied. Repeating each value keeps the
    # proportions and takes 450 x 450 pairs past the sorted path's threshold.
    before = np.repeat([1.0, 2.0, 3.0], repeat)
    after = np.repeat([2.0, 3.0, 4.0], repeat)
    assert rank_test(before, after)[0] == pytest.approx(5 / 9, rel=1e-12)
    assert rank_test(after, before)[0] == pytest.approx(-5 / 9, rel=1e-12)


@pytest.mark.parametrize("size", [1, 5, 600])
def test_a_side_without_points_or_without_spread_is_no_evidence(size):
    values = np.full(size, 2.0)
    empty = np.array([])
    assert rank_test(empty, values) == (0.0, 1.0)
    assert rank_test(values, empty) == (0.0, 1.0)
    # All values equal: the tie-corrected variance is zero, not a division by it.
    assert rank_test(values, np.full(500, 2.0)) == (0.0, 1.0)


def test_the_rank_test_on_raw_samples_never_builds_the_pair_matrix():
    # Raw samples run to thousands a side: 1000 x 1000 pairs as a float matrix is 8 MB, the
    # sorted count needs a few copies of the samples.
    before, after = _RNG.normal(0.0, 1.0, 1000), _RNG.normal(0.0, 1.0, 1000)
    tracemalloc.start()
    try:
        rank_test(before, after)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_the_shift_is_the_log_median_difference_and_its_magnitude_a_percentage():
    before = np.log([103.0, 100.0, 101.0, 104.0, 102.0])
    after = np.log([109.0, 112.0, 110.0, 111.0, 108.0, 113.0])
    conf = confirm_shift(before, after, Floors())
    shift = (math.log(110.0) + math.log(111.0)) / 2.0 - math.log(102.0)  # medians of the logs
    assert conf.shift == pytest.approx(shift, rel=1e-12)
    assert conf.magnitude_pct == pytest.approx((math.sqrt(110.0 * 111.0) / 102.0 - 1.0) * 100.0)
    assert conf.effect == 1.0


def test_the_default_significance_floor_is_one_in_a_thousand():
    # Five points a side, fully separated by 20 %: p is about 0.012, every other floor clears.
    before = np.log([100.0, 101.0, 102.0, 103.0, 104.0])
    conf = confirm_shift(before, before + math.log(1.2), Floors())
    assert 1e-3 < conf.p_value < 0.05
    assert not conf.confirmed
    assert confirm_shift(before, before + math.log(1.2), Floors(alpha=0.05)).confirmed


SLOPE = 0.01


def _drifting(step: float) -> tuple[np.ndarray, np.ndarray]:
    # 12 points then 10 on one line of slope SLOPE, the second run moved by ``step``.
    return SLOPE * np.arange(12), SLOPE * np.arange(12, 22) + step


def test_a_pure_linear_drift_is_not_a_step():
    # The medians are 11 points apart on the line (a shift of 0.11), every after point is
    # slower and p is about 1e-4: only the drift correction tells it from a step.
    conf = confirm_shift(*_drifting(0.0), Floors())
    assert conf.shift == pytest.approx(11 * SLOPE)
    assert conf.effect == 1.0 and conf.p_value < 1e-3
    assert not conf.confirmed


@pytest.mark.parametrize("step", [0.05, -0.05])
def test_the_step_is_what_the_drift_leaves_of_the_shift(step):
    before, after = _drifting(step)
    assert confirm_shift(before, after, Floors(magnitude=abs(step) - 1e-6)).confirmed == (step > 0)
    assert not confirm_shift(before, after, Floors(magnitude=abs(step) + 1e-6)).confirmed


def test_a_step_against_the_drift_is_not_reported_in_the_drifts_direction():
    # Drift up by 0.11 between the medians, a step down of 0.05: the medians still moved up
    # and every rank says slower, but the change itself made the kernel faster.
    conf = confirm_shift(*_drifting(-0.05), Floors(magnitude=0.01))
    assert conf.shift > 0 and conf.effect > 0
    assert not conf.confirmed


def test_medians_and_ranks_that_disagree_are_no_change():
    # The after median is one higher, but most after values are lower (Cliff's delta -0.35,
    # p about 1e-5): the sides differ in shape, not in level.
    before = np.repeat([5.0, 9.0], [80, 60])
    after = np.repeat([6.0, 0.0], [80, 60])
    conf = confirm_shift(before, after, Floors())
    assert conf.shift == 1.0 and conf.effect < -0.3 and conf.p_value < 1e-3
    assert not conf.confirmed


@pytest.mark.parametrize(
    ("before", "after", "slope"),
    [
        ([0.0, 1.0, 2.0], [10.0, 30.0], 1.0),  # only a side of 3 or more points has a trend
        ([0.0, 1.0], [10.0, 30.0], 0.0),
        ([0.0, 1.0, 3.0, 6.0], [5.0], 2.0),  # pair slopes 1, 1.5, 2, 2, 2.5, 3
        ([0.0, 0.1, 0.2, 0.3], [1.0, 1.0, 1.0], 0.1),  # six slopes of 0.1, three of 0
        ([0.0, 0.01, 0.02, 0.03, 0.04], [1.05, 1.06, 1.07, 1.08, 1.09], 0.01),  # a step between
    ],
)
def test_drift_slope_is_the_median_pair_slope_within_each_side(before, after, slope):
    assert drift_slope(np.array(before), np.array(after)) == pytest.approx(slope, rel=1e-12)


STEPS = [1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06]


@pytest.mark.parametrize(
    ("values", "kept"),
    [
        ([1.01, 2.0, 1.0, 1.02], [1.01, 1.0, 1.02]),  # four points are enough to trim
        ([1.0, 2.0, 1.01], [1.0, 2.0, 1.01]),  # three are not
        ([1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 2.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 2.0]),  # no spread
        ([1.0, 1.02, 1.01, 1.03, 1.3, 1.04, 1.02], [1.0, 1.02, 1.01, 1.03, 1.04, 1.02]),
        # Median 1.035, lower-half sigma 0.0239: 1.12 is 3.5 sigmas out.
        ([1.12, *STEPS], STEPS),
        # Median 2, lower-half sigma 1: 5 is exactly 3 sigmas out.
        ([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 5.0], [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 5.0]),
    ],
)
def test_trim_slow_tail_drops_only_points_far_on_the_slow_side(values, kept):
    # A fast half of equal values (a quantised timer) has no spread to measure a tail by;
    # a point exactly k sigmas out is not "more than" k.
    assert trim_slow_tail(np.array(values)).tolist() == kept


@dataclass(frozen=True)
class _Run:
    """A run as the store reads it back: per-sample flags and clocks, or none."""

    samples_ns: Sequence[float]
    throttled: Sequence[bool] = ()
    sm_clock_mhz: Sequence[float] = ()
    status: str = "ok"


def test_throttled_samples_and_their_clocks_do_not_count():
    run = _Run((1.0, 2.0, 3.0, 4.0), (False, True, False, True), (1980.0, 1500.0, 1980.0, 1400.0))
    samples, clocks = counted_samples(run)
    assert samples.tolist() == [1.0, 3.0]
    assert clocks is not None and clocks.tolist() == [1980.0, 1980.0]


@pytest.mark.parametrize(
    ("throttled", "clocks"),
    [((), ()), ((True, False), (1980.0,)), ((False,) * 3, (1980.0,) * 5)],
    ids=["unknown", "short", "long"],
)
def test_flags_and_clocks_that_do_not_match_the_samples_are_ignored(throttled, clocks):
    samples, counted_clocks = counted_samples(_Run((1.0, 2.0, 3.0, 4.0), throttled, clocks))
    assert samples.tolist() == [1.0, 2.0, 3.0, 4.0]
    assert counted_clocks is None


def test_a_change_that_follows_the_clock_vanishes_in_cycle_space():
    # The after runs take 10 % longer at a clock 10 % lower: the same cycles.
    rng = np.random.default_rng(3)

    def runs(level: float, clock: float) -> list[_Run]:
        return [
            _Run(tuple(level * np.exp(rng.normal(0, 0.005, 200))), (), (clock,) * 200)
            for _ in range(3)
        ]

    before, after = runs(1000.0, 1980.0), runs(1100.0, 1800.0)
    in_time, in_cycles = confirm_on_samples(before, after, Floors())
    assert in_time.confirmed and in_time.magnitude_pct == pytest.approx(10.0, abs=0.5)
    assert in_cycles is not None and not in_cycles.confirmed
    unclocked = [*after[:2], _Run(after[2].samples_ns)]
    assert confirm_on_samples(before, unclocked, Floors())[1] is None


def test_a_confirmation_is_an_immutable_value():
    conf = Confirmation(0.1, 0.5, 1e-4, True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        conf.confirmed = False  # type: ignore[misc]


def test_a_faster_step_on_a_rising_trend_is_not_confirmed_as_a_slowdown():
    # Times rise 1 % a point and drop 5 % at the split: the medians move up 15 %, but once
    # the trend is taken out the step is a speedup. Steps opposite to the raw shift are no
    # change of the kind the shift claims.
    rng = np.random.default_rng(0)
    x = 0.01 * np.arange(40) + rng.normal(0, 0.001, 40)
    x[20:] -= 0.05
    conf = confirm_shift(x[:20], x[20:], Floors())
    assert conf.shift > 0.1 and conf.effect > 0.9 and conf.p_value < 1e-6
    assert not conf.confirmed


def test_the_median_of_sorted_points_is_numpys_to_the_last_bit():
    """The detector's medians skip np.median's overhead (2.4x faster detection); the values,
    and so every verdict, stay np.median's: odd and even counts, ties, any scale."""
    rng = np.random.default_rng(11)
    for size in [1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 50, 51]:
        for _ in range(200):
            values = np.sort(rng.normal(0.0, 1.0, size) * 10.0 ** rng.uniform(-6, 6))
            assert sorted_median(values) == float(np.median(values)), values
    assert sorted_median(np.array([1.0, 1.0, 2.0, 2.0])) == 1.5
    assert sorted_median(np.array([0.1, 0.2])) == float(np.median([0.1, 0.2]))
