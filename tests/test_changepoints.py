"""The change-point detector on synthetic series with GPU-like noise (analysis/synthetic.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from kernelwatch.analysis.changepoints import DetectorConfig, History, append, detect
from kernelwatch.analysis.synthetic import NoiseModel, make_series, with_step

# The false-alarm rate docs/DETECTION.md documents for unchanged series.
DOCUMENTED_FALSE_ALARM_RATE = 0.03


def test_three_percent_steps_are_found_within_two_commits():
    found = 0
    for seed in range(100):
        y, at = with_step(seed, jitter=0.01, step=0.03 if seed % 2 else -0.03)
        points = detect(y).change_points
        hits = [cp for cp in points if abs(cp.index - at) <= 2]
        if hits and len(points) == 1:
            found += 1
            assert hits[0].direction == ("regression" if seed % 2 else "improvement")
            assert abs(hits[0].magnitude_pct - (3 if seed % 2 else -3)) < 1.5
    # Full GPU-like noise: outliers, autotune flips, bursts and drift on 1 % jitter.
    assert found >= 93


def test_unchanged_series_stay_within_the_documented_false_alarm_rate():
    rng = np.random.default_rng(2024)
    alarms = sum(bool(detect(make_series(rng, 200, 0).y).change_points) for _ in range(1000))
    assert alarms <= 1000 * DOCUMENTED_FALSE_ALARM_RATE


@pytest.mark.parametrize("where", ["middle", "end"])
def test_a_throttling_burst_of_three_points_raises_nothing(where):
    for seed in range(20):
        rng = np.random.default_rng(seed)
        y = make_series(rng, 100, 0, jitter=0.01, bursts=False).y.copy()
        start = 50 if where == "middle" else 97
        y[start : start + 3] *= 1.3
        assert detect(y).change_points == (), f"seed {seed}"


def test_cycle_space_tells_a_clock_change_from_a_code_change():
    rng = np.random.default_rng(7)
    model = NoiseModel(burst_rate=0.0)
    series = make_series(rng, 120, 0, model, jitter=0.005)
    clocks = np.full(120, 1980.0)
    # A whole stretch at a 10 % lower clock (a power cap set on the node): time moves,
    # cycles do not.
    env = series.y.copy()
    env[60:] *= 1.1
    env_clocks = clocks.copy()
    env_clocks[60:] /= 1.1
    [change] = detect(env, clock_mhz=env_clocks).change_points
    assert change.cause == "environment"
    code = series.y.copy()
    code[60:] *= 1.1
    [change] = detect(code, clock_mhz=clocks).change_points
    assert change.cause == "code"
    assert detect(code).change_points[0].cause == "unknown"


def test_rates_invert_the_direction():
    y, _ = with_step(3, jitter=0.005, step=-0.05)
    [change] = detect(y, DetectorConfig(lower_is_better=False)).change_points
    assert change.direction == "regression"
    assert change.magnitude_pct == pytest.approx(-5, abs=1)


def test_a_short_series_is_too_short_not_unchanged():
    found = detect([1.0, 1.1, 0.9])
    assert found.status == "too_short"
    assert found.change_points == ()


@pytest.mark.parametrize("bad", [[1.0, -2.0] * 10, [1.0, float("nan")] * 10, [[1.0]]])
def test_invalid_values_are_refused(bad):
    with pytest.raises(ValueError, match="series"):
        detect(bad)


def test_a_year_of_nightlies_takes_milliseconds():
    y, _ = with_step(11, jitter=0.01, step=0.05, n=365)
    detect(y)
    start = time.perf_counter()
    for _ in range(10):
        detect(y)
    assert (time.perf_counter() - start) / 10 < 0.05


def test_incremental_matches_batch_and_keeps_a_bounded_tail():
    rng = np.random.default_rng(5)
    series = make_series(rng, 600, 0, jitter=0.005)
    y = series.y.copy()
    planted = [150, 320, 470]
    for at, step in zip(planted, [0.05, -0.04, 0.06], strict=True):
        y[at:] *= 1 + step
    batch = [cp.index for cp in detect(y).change_points]
    history = History()
    for value in y:
        history, found = append(history, [float(value)])
        assert len(history.tail) <= 4 * history.config.window
    incremental = [cp.index for cp in found.change_points]
    assert len(incremental) == len(planted)
    for at in planted:
        assert any(abs(i - at) <= 2 for i in incremental)
        assert any(abs(i - at) <= 2 for i in batch)
    assert found.n == history.length == 600


def test_incremental_refuses_mixing_clocked_and_unclocked_points():
    history, _ = append(History(), [1.0] * 5, [1980.0] * 5)
    with pytest.raises(ValueError, match="clock_mhz"):
        append(history, [1.0])


def test_sorted_quantile_matches_numpy():
    from kernelwatch.analysis.confirm import _quantile

    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 30, 61):
        values = rng.lognormal(size=size)
        for q in (0.0, 0.1587, 0.5, 1.0):
            assert _quantile(np.sort(values), q) == pytest.approx(np.quantile(values, q))


@pytest.mark.parametrize("seed", range(5))
def test_a_regression_fixed_15_points_later_is_two_changes(seed):
    rng = np.random.default_rng(seed)
    level = np.r_[np.ones(20), np.full(15, 1.08), np.ones(15)]
    y = level * np.exp(rng.normal(0.0, 0.003, level.size))
    found = detect(y).change_points
    assert [cp.direction for cp in found] == ["regression", "improvement"]
    assert abs(found[0].index - 20) <= 2 and abs(found[1].index - 35) <= 2


def test_a_step_under_half_the_series_noise_is_not_reported():
    # The magnitude floor is noise_factor times the whole series' point-to-point noise: a
    # clean 1% step in a quiet stretch of a series that is mostly 5% noise stays under it,
    # though it clears the fixed min_magnitude, the rank test and the effect floor.
    rng = np.random.default_rng(0)
    quiet = rng.normal(0.0, 0.002, 60)
    quiet[30:] += np.log(1.01)
    y = np.exp(np.concatenate([rng.normal(0.0, 0.05, 140), quiet]))
    found = detect(y)
    assert found.noise_pct * DetectorConfig().noise_factor > 1.0 > DetectorConfig().min_magnitude
    assert found.change_points == ()
    without_floor = detect(y, DetectorConfig(noise_factor=0.0)).change_points
    assert [cp.index for cp in without_floor] == [170]
