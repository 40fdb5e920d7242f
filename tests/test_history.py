"""Change points on measurement records, confirmed on their raw samples."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from factories import measurement

from kernelwatch.analysis.changepoints import detect
from kernelwatch.analysis.record_changes import detect_measurements
from kernelwatch.analysis.shift_test import confirm_on_samples
from kernelwatch.analysis.thresholds import DetectorConfig


def _run(rng: np.random.Generator, center: float, clock: float | None, status: str = "ok"):
    samples = center * np.exp(rng.normal(0, 0.01, 50))
    if status != "ok":
        return measurement(samples_ns=(), status=status, reason="planted")
    clocks = (clock,) * 50 if clock is not None else ()
    return measurement(samples_ns=samples, sm_clock_mhz=clocks)


def test_a_code_change_is_confirmed_on_the_samples_and_indexed_into_the_runs():
    rng = np.random.default_rng(1)
    runs = [_run(rng, 1000.0 * (1.05 if i >= 40 else 1.0), 1980.0) for i in range(80)]
    runs.insert(10, _run(rng, 1000.0, None, status="error"))
    found = detect_measurements(runs)
    [change] = found.change_points
    assert change.index == 41
    assert change.cause == "code"
    assert found.n == 81


def test_a_clock_change_is_labelled_environment():
    rng = np.random.default_rng(2)
    runs = [
        _run(rng, 1000.0 * (1.08 if i >= 40 else 1.0), 1980.0 / (1.08 if i >= 40 else 1.0))
        for i in range(80)
    ]
    [change] = detect_measurements(runs).change_points
    assert change.cause == "environment"


def test_runs_without_clocks_leave_the_cause_unknown():
    rng = np.random.default_rng(3)
    runs = [_run(rng, 1000.0 * (0.9 if i >= 30 else 1.0), None) for i in range(60)]
    [change] = detect_measurements(runs).change_points
    assert (change.direction, change.cause) == ("improvement", "unknown")


def test_a_change_the_raw_samples_do_not_confirm_is_dropped():
    # Each run's median moves 4%, clean enough for the series of medians; the samples, 10%
    # apart within a run, barely rank apart (Cliff's delta ~0.2, under the 0.3 floor).
    rng = np.random.default_rng(0)
    runs = [
        measurement(samples_ns=1000.0 * (1.04 if i >= 40 else 1.0) * np.exp(rng.normal(0, 0.1, 50)))
        for i in range(80)
    ]
    medians = [float(np.median(m.samples_ns)) for m in runs]
    assert [cp.index for cp in detect(medians).change_points] == [40]
    assert detect_measurements(runs).change_points == ()


def test_runs_that_did_not_finish_are_skipped_even_with_samples():
    # A run that timed out or errored may still have recorded samples; they carry no time.
    # The status is built at run time, as one read from JSON or the store is.
    rng = np.random.default_rng(4)
    runs = [_run(rng, 1000.0 * (1.05 if i >= 75 else 1.0), 1980.0) for i in range(150)]
    for start, status in ((25, "error"), (110, "timeout")):
        for at in range(start, start + 20):
            runs[at] = measurement(samples_ns=np.full(50, 300.0), status=status, reason="x")
    runs = [replace(m, status="".join(m.status)) for m in runs]
    [change] = detect_measurements(runs).change_points
    assert change.index == 75


def test_each_change_is_judged_on_its_own_samples():
    # Two changes: the first only the medians show (samples 10% apart within a run), the
    # second a clean 10% step; dropping the first must not drop the second.
    rng = np.random.default_rng(0)
    runs = [
        measurement(samples_ns=1000.0 * (1.04 if i >= 40 else 1.0) * np.exp(rng.normal(0, 0.1, 50)))
        for i in range(80)
    ] + [_run(rng, 1040.0 * 1.1, None) for _ in range(40)]
    assert [cp.index for cp in detect_measurements(runs).change_points] == [80]


def test_the_samples_are_held_to_the_detectors_magnitude_floor(monkeypatch):
    """Step 6 uses the floor the detector used on the medians: the larger of min_magnitude and
    noise_factor times the series' noise. A series noisy enough that the noise term decides
    shows which floor the raw-sample confirmation was given."""
    import kernelwatch.analysis.record_changes as record_changes

    given = []

    def spy(before, after, floors):
        given.append(floors)
        return confirm_on_samples(before, after, floors)

    monkeypatch.setattr(record_changes, "confirm_on_samples", spy)
    rng = np.random.default_rng(4)
    runs = [
        measurement(samples_ns=1000.0 * (1.3 if i >= 40 else 1.0) * np.exp(rng.normal(0, 0.15, 50)))
        for i in range(80)
    ]
    config = DetectorConfig()
    medians = [float(np.median(m.samples_ns)) for m in runs]
    noise = detect(medians, config).noise_pct / 100.0
    assert config.noise_factor * noise > config.min_magnitude  # the noise term decides
    [change] = detect_measurements(runs, config).change_points
    assert change.index == 40
    assert [f.magnitude for f in given] == [config.noise_factor * noise]
    assert (given[0].alpha, given[0].effect) == (config.alpha, config.min_effect)
