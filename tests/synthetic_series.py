"""Labelled synthetic kernel-time series with GPU-like noise, shared by the tests and the
detector evaluations (scripts/eval_detection.py, scripts/eval_detector_cases.py), which put
tests/ on their path: test data, not part of the installed package.

Each point stands for one commit's measured time (a run's median). The noise model follows
what shared GPU fleets show (docs/DETECTION.md lists the parameters and why):

- multiplicative log-normal jitter, sigma drawn per series log-uniformly in 0.3-3 %;
- right-skewed interference outliers (another tenant, a late launch): rare, always slower;
- per-point bimodal autotune flips: some series have a second config that the autotuner
  picks on a fraction of runs, a few percent slower;
- short throttling bursts (1-3 points, 5-30 % slower), with the SM clock lowered to match,
  so they vanish in cycle space as real throttling does;
- slow drift: part of a long wave (period 400-800 points) of amplitude up to 1.5 %,
  as thermal or driver drift moves a machine's baseline over weeks;
- steps of 1-20 % up or down (log-uniform in size, so small steps are as common as in real
  histories), at least ``MIN_GAP`` points apart and from either end.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NOMINAL_CLOCK_MHZ = 1980.0
MIN_GAP = 20
EDGE = 10


@dataclass(frozen=True)
class NoiseModel:
    """The generator's parameters; the defaults are the ones the evaluation uses."""

    jitter: tuple[float, float] = (0.003, 0.03)
    outlier_rate: float = 0.03
    outlier_scale: float = 0.08
    flip_series_fraction: float = 0.3
    flip_rate: tuple[float, float] = (0.05, 0.2)
    flip_penalty: tuple[float, float] = (0.02, 0.08)
    burst_rate: float = 1 / 60
    burst_length: tuple[int, int] = (1, 3)
    burst_slowdown: tuple[float, float] = (0.05, 0.30)
    drift: float = 0.015
    drift_period: tuple[float, float] = (400.0, 800.0)
    step: tuple[float, float] = (0.01, 0.20)


@dataclass(frozen=True)
class SyntheticSeries:
    """One labelled series: times in ns, the SM clock per point, and the planted changes
    (index of the first point of each new regime, with its relative step)."""

    id: str
    y: np.ndarray
    clock_mhz: np.ndarray
    change_points: tuple[int, ...]
    steps: tuple[float, ...]
    jitter: float


def make_series(
    rng: np.random.Generator,
    n: int,
    n_changes: int,
    model: NoiseModel = NoiseModel(),
    series_id: str = "s",
    jitter: float | None = None,
    steps: tuple[float, ...] | None = None,
    bursts: bool = True,
) -> SyntheticSeries:
    """One series of ``n`` points with ``n_changes`` planted steps.

    ``jitter`` and ``steps`` pin what is otherwise drawn from ``model`` (tests use them to
    plant a known step); ``bursts=False`` leaves throttling out.
    """
    sigma = jitter if jitter is not None else _log_uniform(rng, *model.jitter)
    cps = _change_positions(rng, n, n_changes)
    if steps is None:
        sizes = _log_uniform(rng, *model.step, size=n_changes)
        steps = tuple(float(s) for s in sizes * rng.choice([-1.0, 1.0], size=n_changes))
    level = np.zeros(n)
    for cp, step in zip(cps, steps, strict=True):
        level[cp:] += np.log1p(step)

    log_t = level + rng.normal(0.0, sigma, n)
    period = rng.uniform(*model.drift_period)
    phase = rng.uniform(0, 2 * np.pi)
    log_t += rng.uniform(0, model.drift) * np.sin(2 * np.pi * np.arange(n) / period + phase)
    outliers = rng.random(n) < model.outlier_rate
    log_t[outliers] += np.log1p(rng.exponential(model.outlier_scale, outliers.sum()))
    if rng.random() < model.flip_series_fraction:
        flips = rng.random(n) < rng.uniform(*model.flip_rate)
        log_t[flips] += np.log1p(rng.uniform(*model.flip_penalty))

    clock = NOMINAL_CLOCK_MHZ * np.exp(rng.normal(0.0, 0.002, n))
    if bursts:
        for start in np.flatnonzero(rng.random(n) < model.burst_rate):
            length = int(rng.integers(model.burst_length[0], model.burst_length[1] + 1))
            slow = rng.uniform(*model.burst_slowdown)
            # Compute-bound kernels stretch in proportion to the lost clock.
            clock[start : start + length] /= 1 + slow
            log_t[start : start + length] += np.log1p(slow)

    base_ns = _log_uniform(rng, 5e3, 5e6)
    return SyntheticSeries(series_id, base_ns * np.exp(log_t), clock, cps, steps, sigma)


def make_dataset(
    seed: int,
    count: int,
    n: int,
    changed_fraction: float = 0.5,
    max_changes: int = 3,
    model: NoiseModel = NoiseModel(),
) -> list[SyntheticSeries]:
    """``count`` series of ``n`` points; ``changed_fraction`` of them carry 1..max_changes
    steps, the rest none."""
    rng = np.random.default_rng(seed)
    capacity = max(0, (n - 2 * EDGE) // MIN_GAP + 1)
    out = []
    for i in range(count):
        changes = 0
        if i < round(count * changed_fraction):
            changes = int(rng.integers(1, min(max_changes, capacity) + 1))
        out.append(make_series(rng, n, changes, model, series_id=f"syn-{seed}-{i}"))
    return out


def with_step(seed: int, jitter: float, step: float, n: int = 120) -> tuple[np.ndarray, int]:
    """One series of ``n`` points with the full noise model at ``jitter`` and one step of
    ``step`` planted at least 40 points from either end; returns it and the step's index
    (the tests' and docs/DETECTION.md's "3 % steps" case)."""
    rng = np.random.default_rng(seed)
    series = make_series(rng, n, 0, jitter=jitter)
    at = int(rng.integers(40, n - 40 + 1))
    y = series.y.copy()
    y[at:] *= 1 + step
    return y, at


def _change_positions(rng: np.random.Generator, n: int, k: int) -> tuple[int, ...]:
    # Draw gaps with the minimum spacing taken out, then add it back: uniform over all
    # placements that keep MIN_GAP between changes and EDGE from either end.
    if k == 0:
        return ()
    slack = n - 2 * EDGE - (k - 1) * MIN_GAP
    if slack < 1:
        raise ValueError(
            f"{k} changes need a series of at least {2 * EDGE + (k - 1) * MIN_GAP + 1}"
        )
    offsets = np.sort(rng.choice(slack, size=k, replace=True))
    return tuple(int(EDGE + o + i * MIN_GAP) for i, o in enumerate(offsets))


def _log_uniform(
    rng: np.random.Generator, low: float, high: float, size: int | None = None
) -> np.ndarray | float:
    return np.exp(rng.uniform(np.log(low), np.log(high), size))


#: The shaped cases' nightly noise (issue 47 drew them so): log-normal noise a night, a share
#: of nights slowed by a right-skewed interference outlier, and its mean.
SHAPE_NOISE, SHAPE_OUTLIER_RATE, SHAPE_OUTLIER_MEAN = 0.01, 0.02, 0.05
#: A drift's change per night and how many nights it lasts.
DRIFT_SLOPE, DRIFT_NIGHTS = 0.005, 20


@dataclass(frozen=True)
class Shaped:
    """A nightly series of one shape, with where its changes start (the first night each
    moved) and, for a drift, where it starts."""

    shape: str
    y: np.ndarray
    steps: tuple[int, ...]
    drift_start: int | None = None


def shaped(rng: np.random.Generator, shape: str) -> Shaped:
    """One series of ``shape``: ``drift`` (60 nights, +0.5 % a night for 20 nights from
    night 20), ``step on drift`` (90 nights, that drift from night 41 and a 10 % step at 50)
    or ``partial revert`` (60 nights, +10 % at 30, then -6 % at 34)."""
    n, changes, drift = 60, (), None
    if shape == "drift":
        drift = 20
    elif shape == "step on drift":
        n, drift, changes = 90, 41, ((50, 0.10),)
    elif shape == "partial revert":
        changes = ((30, 0.10), (34, -0.06))
    else:
        raise ValueError(f"unknown shape {shape!r}")
    t = np.arange(n)
    level = np.zeros(n)
    if drift is not None:
        level += np.clip(t - drift + 1, 0, DRIFT_NIGHTS) * DRIFT_SLOPE
    for at, size in changes:
        level += (t >= at) * np.log1p(size)
    y = 1e5 * np.exp(level) * rng.lognormal(0.0, SHAPE_NOISE, n)
    slowed = rng.random(n) < SHAPE_OUTLIER_RATE
    y[slowed] *= 1.0 + rng.exponential(SHAPE_OUTLIER_MEAN, slowed.sum())
    return Shaped(shape, y, tuple(at for at, _ in changes), drift)


#: The shaped cases, in the order the tables show them.
SHAPES = ("drift", "step on drift", "partial revert")
