"""Same-GPU A/B verdicts from interleaved samples."""

from __future__ import annotations

import numpy as np
import pytest

from kernelwatch.analysis.verdict import VerdictConfig, compare, compare_measurements

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


def test_bad_samples_are_refused():
    with pytest.raises(ValueError, match="positive"):
        compare([1.0, -1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="at least 2"):
        compare([1.0], [1.0, 2.0])
