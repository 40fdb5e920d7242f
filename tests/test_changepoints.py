"""The change-point detector on synthetic series with GPU-like noise (tests/synthetic_series.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.stats import mannwhitneyu, norm
from synthetic_series import NoiseModel, make_series, with_step

from kernelwatch.analysis import changepoints
from kernelwatch.analysis.changepoints import (
    Detection,
    DetectorConfig,
    History,
    _abs_deviation,
    _refine,
    append,
    detect,
    local_rank_scan,
)
from kernelwatch.analysis.noise import relative_noise
from kernelwatch.analysis.shift_test import confirm_shift

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
    from kernelwatch.analysis.shift_test import _quantile

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


def _levels(*runs: tuple[int, float], noise: float = 0.002, seed: int = 1) -> np.ndarray:
    """Runs of (points, level) in order, with multiplicative normal noise of ``noise``."""
    level = np.concatenate([np.full(n, value) for n, value in runs])
    return level * np.exp(np.random.default_rng(seed).normal(0.0, noise, level.size))


def test_rank_scan_is_the_mann_whitney_z_of_the_windows_either_side():
    # Against scipy's normal approximation (no continuity correction) on the same two
    # windows, including the truncated windows near both ends.
    x = np.random.default_rng(3).normal(size=23)
    window = 8
    z = local_rank_scan(x, window)
    assert z.shape == (x.size + 1,)
    for k in range(x.size + 1):
        before, after = x[max(0, k - window) : k], x[k : k + window]
        if before.size == 0 or after.size == 0:
            assert z[k] == 0.0
            continue
        test = mannwhitneyu(after, before, use_continuity=False, method="asymptotic")
        expected = np.sign(test.statistic - before.size * after.size / 2) * norm.isf(
            test.pvalue / 2
        )
        assert z[k] == pytest.approx(expected, rel=1e-9), k


def test_absolute_deviation_rows_match_nanmedian():
    rng = np.random.default_rng(4)
    rows = rng.normal(size=(6, 9))
    # NaNs scattered through the rows (not only at the end), leaving odd and even counts.
    for row, missing in enumerate([0, 1, 2, 3, 4, 7]):
        rows[row, rng.choice(9, size=missing, replace=False)] = np.nan
    counts = np.count_nonzero(~np.isnan(rows), axis=1)
    expected = np.nansum(np.abs(rows - np.nanmedian(rows, axis=1)[:, None]), axis=1)
    assert _abs_deviation(rows, counts) == pytest.approx(expected, rel=1e-12)


def test_slow_points_just_before_a_step_do_not_pull_it_onto_them():
    """Issue 47: two interference outliers three and four points before a 1.6 % step (4
    noise sigmas) placed the split on them in 20 series of 20: least absolute deviations
    count their whole distance from the old level as evidence of the new one. The split is
    refined against the levels either side with each point's cost capped, so they cost the
    same on either side. Misplaced steps were most of the main evaluation's false positives
    (docs/DETECTION.md)."""
    placed = []
    for seed in range(20):
        x = np.random.default_rng(seed).normal(0.0, 0.004, 100)
        x[40:] += 0.016
        x[[36, 37]] += 0.04
        placed.append([cp.index for cp in detect(100.0 * np.exp(x)).change_points])
    assert all(found == [40] for found in placed), placed


def test_a_refined_split_never_crosses_a_short_regime_of_its_own():
    """A partial revert whose revert starts with a point back near the old level: the four
    points of the short regime fit neither level either side, so without a bound the
    refinement slid the first change across them to that point (1 series of 20 right),
    and the revert was lost with it."""
    found = []
    for seed in range(20):
        x = np.random.default_rng(seed).normal(0.0, 0.004, 80)
        x[30:34] += 0.095
        x[34:] += 0.03
        x[34] -= 0.025
        found.append([cp.index for cp in detect(100.0 * np.exp(x)).change_points])
    assert all(points == [30, 34] for points in found), found


#: _refine's configuration in the tests below: min_size 6 (a zone of 6 points either side
#: of the split it is handed), window 30; a noise of 0.01, so the cap is 0.025.
_REFINE = DetectorConfig()


def _stepped(at: int, size: float, n: int = 60) -> np.ndarray:
    x = np.ones(n)
    x[at:] += size
    return x


@pytest.mark.parametrize(("burst", "placed"), [(3, 30), (4, 25)])
def test_a_refined_split_crosses_a_burst_of_three_slow_points_but_not_four(burst, placed):
    """The scan put the split on a burst of slow points fitting neither level, one point of
    the old level before the step: three such points are crossed to the step; four are a
    level of their own, which the split never crosses."""
    x = _stepped(30, 0.05)
    x[29 - burst : 29] += 0.1
    assert _refine(x, 29 - burst, 0, x.size, _REFINE, 0.01) == placed


def test_a_refined_split_stays_where_the_levels_are_within_the_cap():
    """A step of two noise sigmas (under the 2.5-sigma cap): the points' own noise would
    place it, so the split is left where the scan put it."""
    x = _stepped(30, 0.02)
    x[30] = 1.0  # one point of the new level back at the old one
    assert _refine(x, 30, 0, x.size, _REFINE, 0.01) == 30


def test_a_refined_split_keeps_min_size_points_before_the_stretch_end():
    """The step is at 55 of a stretch ending at 60: the split stops at 54, the last one
    leaving min_size points after it."""
    x = _stepped(55, 0.05)
    assert _refine(x, 50, 0, x.size, _REFINE, 0.01) == 54


def test_a_step_with_min_size_points_on_one_side_is_found_at_its_index():
    config = DetectorConfig(alpha=1e-3)
    assert config.min_size == 6
    at_end = _levels((41, 1.0), (6, 1.1))
    assert [cp.index for cp in detect(at_end, config).change_points] == [41]
    at_start = _levels((6, 1.0), (41, 1.1))
    assert [cp.index for cp in detect(at_start, config).change_points] == [6]


@pytest.mark.parametrize("short", [2, 3, 4, 5])
def test_no_change_is_placed_with_fewer_than_min_size_points_on_a_side(short):
    # A loose alpha, so a step this close to an end would pass the test if it were tried there.
    config = DetectorConfig(alpha=0.05)
    for y in (_levels((41, 1.0), (short, 1.1)), _levels((short, 1.0), (41, 1.1))):
        for cp in detect(y, config).change_points:
            assert config.min_size <= cp.index <= y.size - config.min_size


def test_the_located_step_is_the_one_near_the_scan_peak_not_a_larger_one_further_off():
    # The 2.5 % step at 40 scans strongest (full windows both sides); the 20 % step at 20,
    # further than the short scale from it, fits one level either side better, but belongs
    # to its own, weaker peak.
    y = _levels((20, 1.0), (20, 1.2), (30, 1.23))
    assert [cp.index for cp in detect(y).change_points] == [20, 40]


def test_a_step_through_one_halfway_point_does_not_hide_a_later_step():
    # The point between the levels makes the scan peak twice, at equal z, for the same step;
    # the second nomination is skipped, not the end of the search.
    y = _levels((40, 1.0), (1, 1.05), (39, 1.1), (20, 1.15))
    found = [cp.index for cp in detect(y).change_points]
    assert found in ([40, 80], [41, 80])


@pytest.mark.parametrize("lower_is_better", [True, False])
def test_clean_steps_have_the_exact_direction_and_magnitude(lower_is_better):
    config = DetectorConfig(lower_is_better=lower_is_better)
    slower = "regression" if lower_is_better else "improvement"
    faster = "improvement" if lower_is_better else "regression"
    [up] = detect([1.0] * 30 + [1.25] * 30, config).change_points
    assert (up.index, up.direction) == (30, slower)
    assert up.magnitude_pct == pytest.approx(25.0, rel=1e-12)
    [down] = detect([1.25] * 30 + [1.0] * 30, config).change_points
    assert (down.index, down.direction) == (30, faster)
    assert down.magnitude_pct == pytest.approx(-20.0, rel=1e-12)


@pytest.mark.parametrize("lower_is_better", [True, False])
def test_a_provisional_change_has_the_direction_and_magnitude_of_its_tail(lower_is_better):
    config = DetectorConfig(lower_is_better=lower_is_better)
    slower = "regression" if lower_is_better else "improvement"
    faster = "improvement" if lower_is_better else "regression"
    for level, direction, pct in ((1.25, slower, 25.0), (0.8, faster, -20.0)):
        [change] = detect([1.0] * 40 + [level] * 3, config, provisional=True).change_points
        # A faster tail may hold one slow point, so an unchanged point before it can join.
        assert change.index in (39, 40)
        assert (change.direction, change.provisional) == (direction, True)
        assert change.magnitude_pct == pytest.approx(pct, rel=1e-12)


def test_a_provisional_tail_is_judged_against_the_regime_since_the_last_change():
    y = _levels((30, 1.0), (20, 1.1), (20, 1.0), (12, 1.1), (3, 1.2))
    *settled, tail = detect(y, provisional=True).change_points
    assert [(cp.index, cp.provisional) for cp in settled] == [(30, False), (50, False), (70, False)]
    assert (tail.index, tail.direction, tail.provisional) == (82, "regression", True)
    # 1.2 against the 1.1 since point 70, not against the 1.0 of the 30 points before the tail.
    assert tail.magnitude_pct == pytest.approx(100 / 11, abs=1.0)


def test_too_short_starts_below_two_regimes_of_min_size_points():
    config = DetectorConfig()
    short = [1.0, 1.2] * config.min_size
    assert detect(short[:-1], config) == Detection("too_short", 2 * config.min_size - 1, 0.0, ())
    assert detect(short, config).status == "ok"
    history = History(config)
    statuses = []
    for value in [*short, 1.0]:
        history, found = append(history, [value])
        statuses.append(found.status)
    assert statuses == ["too_short"] * (2 * config.min_size - 1) + ["ok", "ok"]


def test_a_zero_time_is_refused():
    with pytest.raises(ValueError, match="positive"):
        detect([1.0, 0.0] * 10)


def test_an_incremental_change_settles_once_two_windows_of_points_follow_it():
    config = DetectorConfig()
    y = _levels((40, 1.0), (2 * config.window, 1.1))
    history, found = append(History(config), list(y[:-1]))
    assert [(cp.index, cp.direction) for cp in found.change_points] == [(40, "regression")]
    assert history.settled == ()
    history, found = append(history, [float(y[-1])])
    assert [cp.index for cp in history.settled] == [40]
    assert history.settled == found.change_points


def test_a_bulk_append_judges_a_change_with_a_full_window_before_it_in_the_tail():
    config = DetectorConfig()
    # 150 points keep the last 120: the tail starts at 30 and point 60 has a full window of
    # the tail before it, so its change is judged there, not left to earlier appends.
    y = _levels((60, 1.0), (90, 1.1))
    history, found = append(History(config), list(y))
    assert history.offset == y.size - 4 * config.window == 30
    assert [cp.index for cp in found.change_points] == [60]


@pytest.mark.parametrize("noise", [0.03, 0.04])
def test_the_noise_floor_is_half_the_series_noise(noise):
    # A clean step in a quiet stretch of a noisy series: just under noise_factor times the
    # series' noise it is not reported, just over it is.
    config = DetectorConfig()
    rng = np.random.default_rng(0)
    noisy, quiet = rng.normal(0.0, noise, 140), rng.normal(0.0, 0.002, 60)
    sigma = relative_noise(np.concatenate([noisy, quiet]))
    assert detect(np.exp(np.concatenate([noisy, quiet]))).noise_pct == pytest.approx(100 * sigma)
    floor = config.noise_factor * sigma
    assert floor > config.min_magnitude
    for factor, expected in ((0.8, []), (1.25, [170])):
        stepped = quiet + np.where(np.arange(60) >= 30, factor * floor, 0.0)
        found = detect(np.exp(np.concatenate([noisy, stepped])), config).change_points
        assert [cp.index for cp in found] == expected, factor


def test_in_a_quiet_series_min_magnitude_is_the_floor():
    y = _levels((40, 1.0), (40, 1.004), noise=0.0005)
    assert detect(y).change_points == ()
    found = detect(y, DetectorConfig(min_magnitude=0.003)).change_points
    assert [cp.index for cp in found] == [40]


def test_the_scan_cut_keeps_confirmation_tests_off_unchanged_series(monkeypatch):
    # The scan only nominates splits beyond its loose cut (100 x alpha); testing every local
    # peak instead finds nothing more on an unchanged series, at many times the cost.
    calls = []

    def counted(before, after, floors):
        calls.append(before.size + after.size)
        return confirm_shift(before, after, floors)

    monkeypatch.setattr(changepoints, "confirm_shift", counted)
    for seed in range(5):
        y = np.exp(np.random.default_rng(seed).normal(0.0, 0.01, 200))
        assert detect(y).change_points == ()
    assert calls == []


def _night_by_night(seed: int, step: float, lags: int = 14) -> list[list[tuple[int, str]]]:
    """The changes ``detect`` reports on each night of a 50-night series whose last ``lags``
    nights moved by ``step`` (1% log-normal noise, 2% slow interference outliers)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.01, 50 + lags)
    outliers = rng.random(x.size) < 0.02
    x[outliers] += np.abs(rng.normal(0.0, 0.05, int(outliers.sum())))
    x[50:] += np.log1p(step)
    return [
        [
            (cp.index, cp.direction)
            for cp in detect(np.exp(x[: 50 + lag]), provisional=True).change_points
        ]
        for lag in range(1, lags + 1)
    ]


@pytest.mark.parametrize("step", [0.05, -0.05, 0.10])
def test_a_step_once_reported_stays_reported_every_later_night(step):
    """Issue 31: a 5-sigma step reported 3-4 nights after it landed was no longer reported at
    5-7 nights in up to a fifth of series (the provisional tail's reach ended before the scan
    could settle it, and a noise dip in a longer tail hid it), and came back at 10. Once
    reported, a change stays reported, at the place it was first reported (within the
    scan's reach of it), until the points contradict it."""
    config = DetectorConfig()
    direction = "regression" if step > 0 else "improvement"
    reported_by_lag_3 = 0
    for seed in range(40):
        nights = _night_by_night(seed, step)
        first = next(
            (
                lag
                for lag, found in enumerate(nights)
                if any(abs(i - 50) <= 2 and d == direction for i, d in found)
            ),
            None,
        )
        if first is None or first > 2:
            continue
        reported_by_lag_3 += 1
        for lag, found in enumerate(nights[first:], start=first + 1):
            assert any(abs(i - 50) <= config.min_size // 2 and d == direction for i, d in found), (
                seed,
                lag,
                nights,
            )
    assert reported_by_lag_3 >= 36  # 90% of series within 3 nights, on 40 series


def test_a_provisional_change_whose_level_returns_is_withdrawn_with_it_said():
    """A 3-night excursion of +25% reported on the nights it stood, then the level returned:
    it is not reported any more, and the detection says it was withdrawn."""
    during = detect([1.0] * 40 + [1.25] * 3, provisional=True)
    assert [(cp.index, cp.provisional) for cp in during.change_points] == [(40, True)]
    after = detect([1.0] * 40 + [1.25] * 3 + [1.0] * 4, provisional=True)
    assert [cp.index for cp in after.change_points if cp.provisional] == []
    assert [(cp.index, cp.direction) for cp in after.withdrawn] == [(40, "regression")]


@pytest.mark.parametrize("seed", range(5))
def test_a_partial_revert_is_two_changes_at_their_own_starts(seed):
    """Issue 31: +10 %, then -6 % four nights later, was one change of about +4 % (the scan
    places no two changes closer than min_size); now each is found where it starts, with its
    own magnitude."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 0.005, 60)
    x[30:] += np.log(1.10)
    x[34:] += np.log(0.94)
    points = [(cp.index, cp.direction) for cp in detect(np.exp(x)).change_points]
    assert points == [(30, "regression"), (34, "improvement")]
    up, down = detect(np.exp(x)).change_points
    assert up.magnitude_pct == pytest.approx(10.0, abs=1.5)
    assert down.magnitude_pct == pytest.approx(-6.0, abs=1.5)


def test_a_burst_that_returns_to_the_level_is_no_short_regime():
    """Three throttled nights right after a step are not a level of their own: the level
    after them is the step's."""
    x = np.full(60, 1.0)
    x[30:] = 1.03
    x[30:33] = 1.25
    rng = np.random.default_rng(0)
    y = x * np.exp(rng.normal(0.0, 0.003, 60))
    assert [cp.index for cp in detect(y).change_points] == [30]
