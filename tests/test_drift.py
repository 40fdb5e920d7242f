"""A slow drift is one finding, named a drift, not a staircase of steps (issue 47, item 1).

The series are drawn as the issue's were, independently of the detector's own evaluation:
1 % log-normal noise a night, 2 % of nights slowed by a right-skewed interference outlier
(exponential, 5 % mean), and a level that drifts +0.5 % a night for 20 nights."""

from __future__ import annotations

import numpy as np

from kernelwatch.analysis.changepoints import detect

SLOPE = 0.005
#: The drift's last night at the old level and first at the new one.
BEFORE, AFTER = 19, 39


def nightly(
    seed: int,
    n: int = 60,
    drift_from: int | None = BEFORE + 1,
    nights: int = AFTER - BEFORE,
    step_at: int | None = None,
    step: float = 0.10,
) -> np.ndarray:
    """A nightly series of ``n`` points: flat, then drifting by SLOPE a night for ``nights``
    nights from ``drift_from`` (None: never), with a step of ``step`` at ``step_at``."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    level = np.zeros(n)
    if drift_from is not None:
        level += np.clip(t - drift_from + 1, 0, nights) * SLOPE
    if step_at is not None:
        level += (t >= step_at) * np.log1p(step)
    y = 1e5 * np.exp(level) * rng.lognormal(0.0, 0.01, n)
    slowed = rng.random(n) < 0.02
    y[slowed] *= 1.0 + rng.exponential(0.05, slowed.sum())
    return y


def test_a_drift_is_one_finding_with_its_start_end_slope_and_total():
    named, exact = 0, 0
    for seed in range(30):
        found = detect(nightly(seed))
        if len(found.drifts) != 1 or len(found.change_points) > 2:
            continue
        named += 1
        (drift,) = found.drifts
        assert drift.direction == "regression" and not drift.ongoing, (seed, drift)
        # The change point that stands for it: where the level began to move, with the
        # whole ramp's change, as every reader of change points sees it.
        (point,) = [cp for cp in found.change_points if cp.drift is drift]
        assert point.index == drift.start + 1 and point.magnitude_pct == drift.total_pct
        exact += (
            abs(drift.slope_pct - 100 * SLOPE) <= 0.2
            and abs(drift.start - BEFORE) <= 3
            and abs(drift.end - AFTER) <= 3
        )
    # Measured at this commit: 30 named a drift, 29 with the slope within 0.2 %/night and
    # both ends within 3 nights (the other a longer, shallower ramp of the same total).
    assert named >= 27 and exact >= 27, (named, exact)


def test_a_drift_still_going_is_open_at_the_newest_point():
    found = detect(nightly(3, n=50, drift_from=30, nights=40))
    (drift,) = found.drifts
    assert drift.ongoing and drift.end == 49, drift


def test_a_step_on_a_drift_is_still_found_as_a_step():
    hits = 0
    for seed in range(30):
        found = detect(nightly(200 + seed, n=90, drift_from=41, step_at=50))
        steps = [cp for cp in found.change_points if cp.drift is None]
        hits += len(found.drifts) == 1 and any(abs(cp.index - 50) <= 2 for cp in steps)
    # Measured at this commit: 24 of 30 (the rest one steeper drift through the step).
    assert hits >= 22, hits


def test_steps_stay_steps_and_unchanged_series_report_nothing():
    drifted, placed = 0, 0
    for seed in range(100):
        for step in (0.02, 0.05, 0.10):
            found = detect(nightly(300 + seed, drift_from=None, step_at=30, step=step))
            drifted += bool(found.drifts)
            placed += any(abs(cp.index - 30) <= 2 for cp in found.change_points)
        assert not detect(nightly(500 + seed, drift_from=None)).change_points
    # Measured at this commit: none of 300 steps read as a drift, 284 placed (as before).
    assert drifted <= 3 and placed >= 280, (drifted, placed)
