"""Same-GPU A/B verdicts from interleaved samples."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kernelwatch.analysis.verdict import (
    VerdictConfig,
    _more_samples,
    compare,
    compare_measurements,
)
from kernelwatch.harness.records import LaunchConfig

DEFAULT = VerdictConfig()


def _samples(seed: int, n: int, center: float, jitter: float = 0.01) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.normal(0, jitter, n)
    outliers = rng.random(n) < 0.03
    noise[outliers] += rng.exponential(0.1, outliers.sum())
    return center * np.exp(noise)


def test_identical_runs_are_the_same():
    v = compare(_samples(1, 400, 100.0), _samples(2, 400, 100.0))
    assert v.verdict == "SAME"
    assert v.ci_low <= 1.0 <= v.ci_high


@pytest.mark.parametrize(("factor", "expected"), [(1.05, "SLOWER"), (0.95, "FASTER")])
def test_a_five_percent_change_is_called(factor, expected):
    v = compare(_samples(1, 200, 100.0), _samples(2, 200, 100.0 * factor))
    assert v.verdict == expected
    assert v.ratio == pytest.approx(factor, rel=0.01)
    assert v.ci_low < v.ratio < v.ci_high
    assert v.p_value < DEFAULT.alpha


def test_higher_is_better_flips_the_names():
    config = VerdictConfig(lower_is_better=False)
    v = compare(_samples(1, 200, 100.0), _samples(2, 200, 105.0), config)
    assert v.verdict == "FASTER"


def test_ambiguous_says_how_many_more_samples_would_settle_it():
    v = compare(_samples(1, 12, 100.0, 0.02), _samples(2, 12, 102.5, 0.02))
    assert v.verdict == "AMBIGUOUS"
    assert v.more_samples is not None and v.more_samples > 0
    assert f"{v.more_samples} more samples" in v.reason
    # The half-width shrinks as 1/sqrt(n) until it no longer reaches the margin edge.
    half_width = (np.log(v.ci_high) - np.log(v.ci_low)) / 2
    distance = abs(abs(np.log(v.ratio)) - np.log1p(DEFAULT.margin))
    assert v.more_samples == np.ceil(v.n_a * (half_width / distance) ** 2 - v.n_a)
    bigger = v.n_a + v.more_samples
    settled = compare(_samples(3, bigger, 100.0, 0.02), _samples(4, bigger, 102.5, 0.02))
    assert settled.verdict == "SLOWER"


def test_a_difference_on_the_margin_cannot_be_settled():
    a = _samples(1, 300, 100.0)
    # B's median sits exactly on the margin.
    v = compare(a, np.random.default_rng(2).permutation(a) * (1 + DEFAULT.margin))
    assert v.verdict == "AMBIGUOUS"
    assert v.more_samples is None
    assert "will not settle" in v.reason


def test_a_clock_change_is_the_same_in_cycle_space():
    a = _samples(1, 300, 100.0)
    b = _samples(2, 300, 110.0)
    v = compare(a, b, a_clock_mhz=np.full(300, 1980.0), b_clock_mhz=np.full(300, 1800.0))
    assert v.verdict == "SLOWER"
    assert v.cycle_verdict == "SAME"
    assert "clock" in v.reason


def test_a_code_change_is_slower_in_cycle_space_too():
    clocks = np.full(300, 1980.0)
    v = compare(
        _samples(1, 300, 100.0), _samples(2, 300, 110.0), a_clock_mhz=clocks, b_clock_mhz=clocks
    )
    assert (v.verdict, v.cycle_verdict) == ("SLOWER", "SLOWER")
    assert "clock" not in v.reason


def test_a_clock_that_fell_further_than_the_time_rose_does_not_blame_the_clock_alone():
    # B takes 10 % longer while its clock fell by 30 %: per cycle it is faster, so the code
    # changed as well as the clock, and the reason must not say "the clock moved, not the
    # code".
    a, b = _samples(1, 300, 100.0), _samples(2, 300, 110.0)
    v = compare(a, b, a_clock_mhz=np.full(300, 1980.0), b_clock_mhz=np.full(300, 1386.0))
    assert (v.verdict, v.cycle_verdict) == ("SLOWER", "FASTER")
    assert "clock" not in v.reason


def test_a_verdict_cannot_be_changed_after_it_is_made():
    v = compare(_samples(1, 50, 100.0), _samples(2, 50, 100.0))
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.verdict = "FASTER"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("half_width", "expected"),
    [
        (0.00901, 1),  # an asymmetric interval straddles the edge: at least one more sample
        (0.01001, 1),  # needs 0.2 % more than the 20 taken: one more
        (0.0997, 1969),  # 20 x 9.97 squared, less the 20 taken: just under the 100x limit
        (0.1002, None),  # just over it: no affordable number settles it
    ],
)
def test_the_samples_proposed_follow_the_square_law_up_to_a_hundred_times(half_width, expected):
    # The estimate sits 0.01 beyond a 0.05 margin in log space, on 20 samples per side.
    assert _more_samples(0.06, half_width, 0.05, 20) == expected


def test_measurements_leave_throttled_samples_out(make_measurement):
    a = _samples(1, 100, 100.0)
    b = _samples(2, 100, 100.0)
    b[:20] *= 1.5
    flags = (True,) * 20 + (False,) * 80
    v = compare_measurements(
        make_measurement(samples_ns=a), make_measurement(samples_ns=b, throttled=flags)
    )
    assert v.verdict == "SAME"
    assert v.n_b == 80
    assert v.cycle_verdict == "SAME"


def test_measurements_say_when_the_configs_differed(make_measurement):
    a, b = _samples(1, 100, 100.0), _samples(2, 100, 100.0)
    equal = LaunchConfig({"BLOCK": 1024}, 4, 1)  # the factory's config, another object
    same = compare_measurements(
        make_measurement(samples_ns=a), make_measurement(samples_ns=b, config=equal)
    )
    assert "configs differed" not in same.reason
    other = LaunchConfig({"BLOCK": 64}, 2, 1)
    retuned = make_measurement(samples_ns=b, config=other)
    assert (
        "configs differed" in compare_measurements(make_measurement(samples_ns=a), retuned).reason
    )
    untuned = make_measurement(samples_ns=a, config=None)
    assert "configs differed" not in compare_measurements(untuned, retuned).reason


@pytest.mark.parametrize(("n_a", "n_b"), [(300, 300), (40, 50)])
def test_the_interval_is_the_percentile_bootstrap_at_its_confidence(n_a, n_b):
    """Equal sides resample pairs of indices; unequal sides resample each side (B first)."""
    a, b = np.log(_samples(1, n_a, 100.0)), np.log(_samples(2, n_b, 103.0))
    config = VerdictConfig(confidence=0.8, resamples=500, seed=3)
    rng = np.random.default_rng(3)
    if n_a == n_b:
        idx = rng.integers(0, n_a, (500, n_a))
        stats = np.median(b[idx], axis=1) - np.median(a[idx], axis=1)
    else:
        b_medians = np.median(b[rng.integers(0, n_b, (500, n_b))], axis=1)
        stats = b_medians - np.median(a[rng.integers(0, n_a, (500, n_a))], axis=1)
    low, high = np.quantile(stats, [0.1, 0.9])
    v = compare(np.exp(a), np.exp(b), config)
    assert (v.ci_low, v.ci_high) == pytest.approx((np.exp(low), np.exp(high)))


def test_clocks_on_one_side_only_give_no_cycle_verdict():
    v = compare(_samples(1, 50, 100.0), _samples(2, 50, 100.0), a_clock_mhz=np.full(50, 1980.0))
    assert v.cycle_verdict is None


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least 2"):
        compare([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least 2"):
        compare([[1.0, 2.0], [3.0, 4.0]], [1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, 0.0], [1.0, 1.0])
    assert compare([1.0, 1.0], [1.0, 1.0]).verdict == "SAME"  # any positive time is a time
    for clocks in ([1980.0, -1.0], [1980.0, 0.0], [1980.0] * 3, [1980.0]):
        with pytest.raises(ValueError, match="positive clock"):
            compare([2.0, 2.0], [2.0, 2.0], a_clock_mhz=clocks, b_clock_mhz=[1980.0] * 2)


def _apart(
    seed: int, n: int, factor: float, jitter: float, faster: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Sides A and B with B ``factor`` times A, or A ``factor`` times B when ``faster``."""
    slow, fast = _samples(seed, n, 100.0, jitter), _samples(seed + 1, n, 100.0 * factor, jitter)
    return (fast, slow) if faster else (slow, fast)


@pytest.mark.parametrize("faster", [False, True])
def test_a_clear_shift_on_too_few_samples_waits_for_the_rank_test(faster):
    # Seven a side cleanly 5% apart: the interval clears the margin, but the rank test
    # cannot reach p < alpha (0.002 at best), so the verdict waits for more samples.
    v = compare(*_apart(5, 7, 1.05, 0.002, faster))
    outside = v.ci_low > 1 + DEFAULT.margin or v.ci_high < 1 - DEFAULT.margin
    assert outside and DEFAULT.alpha < v.p_value < 0.01
    assert v.verdict == "AMBIGUOUS"
    assert compare(*_apart(5, 10, 1.05, 0.002, faster)).verdict == (
        "FASTER" if faster else "SLOWER"
    )


@pytest.mark.parametrize("faster", [False, True])
def test_the_interval_not_the_estimate_must_clear_the_margin(faster):
    # 1.7% apart in 5% noise: the point estimate is past the 1% margin and p < alpha, but
    # the interval's near end is inside the margin.
    v = compare(*_apart(3, 200, 1.02, 0.05, faster))
    assert abs(np.log(v.ratio)) > np.log1p(DEFAULT.margin) and v.p_value < DEFAULT.alpha
    assert v.ci_low < 1 + DEFAULT.margin and v.ci_high > 1 - DEFAULT.margin
    assert v.verdict == "AMBIGUOUS"


def test_drift_shared_by_both_sides_stays_paired():
    # Interleaved runs of identical code under a slow 15% drift: resampled as pairs, the
    # drift cancels; resampled independently, each side's median wanders with it.
    drift = np.exp(np.linspace(0.0, 0.15, 200))
    a, b = drift * _samples(1, 200, 100.0, 0.003), drift * _samples(2, 200, 100.0, 0.003)
    v = compare(a, b)
    assert v.verdict == "SAME"
    assert v.ci_high - v.ci_low < 0.015


def test_a_tail_shift_the_median_misses_is_slower_at_p99():
    # The same body, the slowest 5% of B twice as slow: the median cannot see it, the p99
    # is the ratio of the two sides' 99th percentiles (interpolated in log time, as the
    # verdict works in log time).
    a, b = _samples(1, 2000, 100.0), _samples(2, 2000, 100.0)
    b[np.argsort(b)[-100:]] *= 2.0
    assert compare(a, b).verdict == "SAME"
    tail = compare(a, b, quantile=0.99)
    assert tail.verdict == "SLOWER"
    log_ratio = np.quantile(np.log(b), 0.99) - np.quantile(np.log(a), 0.99)
    assert tail.ratio == pytest.approx(np.exp(log_ratio), rel=1e-12)
    assert tail.p_value < DEFAULT.alpha


def test_the_median_is_the_default_quantile_to_the_bit():
    a, b = _samples(1, 300, 100.0), _samples(2, 300, 103.0)
    assert compare(a, b, quantile=0.5) == compare(a, b)


@pytest.mark.parametrize("quantile", [0.0, 1.0, -0.5, 99.0])
def test_a_quantile_outside_the_open_interval_is_refused(quantile):
    with pytest.raises(ValueError, match="quantile must be in"):
        compare(_samples(1, 20, 100.0), _samples(2, 20, 100.0), quantile=quantile)


def test_the_bootstrap_in_blocks_is_the_bootstrap_whole(monkeypatch):
    # Blocks bound a big serving run's memory; they must not move any kernel verdict.
    cases = [(_samples(1, 300, 100.0), _samples(2, 300, 102.0)),
             (_samples(3, 200, 100.0), _samples(4, 350, 102.0))]  # fmt: skip
    whole = [compare(a, b) for a, b in cases]
    monkeypatch.setattr("kernelwatch.analysis.verdict._BLOCK_CELLS", 1000)
    assert [compare(a, b) for a, b in cases] == whole
