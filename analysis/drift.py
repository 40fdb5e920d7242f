"""A slow drift told apart from a staircase of steps (issue 47).

The scan (``changepoints.py``) compares the points either side of a split, so a level that
creeps up by half a percent a night for twenty nights reads as one or a few steps at
arbitrary nights: a user sees "three regressions" where one commit started a leak or a
thermal trend began. Here every run of consecutive change points in one direction is
explained twice, on the points around it (log values, the regimes either side included):

- as the scan found it, a level per regime (a step at each change point);
- as a *ramp*: a level, then a straight slope from night ``s`` to night ``e``, then a level
  again (a drift that stops; one still going ends at the series' end), with up to two steps
  on top of it where the residuals show one (a step that lands during a drift stays a step).

The ramp wins when its Bayesian information criterion is lower, it lasts at least
``2 * min_size`` points (a shorter slope is a step as far as this noise can tell) and its
total clears the magnitude floor; the change points it explains are then reported as one
drift, with its start, end, slope per point and total. Least squares after the slow-side
outliers (interference, throttling: GPU noise is one-sided) are left out, as in the rank
tests. The ramp's ends are searched on a grid of at most ``window`` points either side of
the run, each fit in closed form, so a group costs a few milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

import numpy as np

from kernelwatch.analysis.shift_test import Floors, rank_test
from kernelwatch.analysis.thresholds import DetectorConfig


class _Change(Protocol):
    """What this module reads of a change point (``changepoints.ChangePoint``, which holds
    a :class:`Drift`: named structurally, so neither module imports the other's)."""

    @property
    def index(self) -> int: ...

    @property
    def direction(self) -> str: ...


ChangePoint = TypeVar("ChangePoint", bound=_Change)

#: Residuals this many noise sigmas on the slow side are outliers, left out of the fits.
_OUTLIER_SIGMAS = 3.0
#: Most steps kept on top of one ramp.
_MAX_STEPS = 2
#: How much lower a ramp's information criterion must be than the scan's steps' (and than
#: the steps it found on top of it, alone): above "very strong" evidence on Kass and
#: Raftery's scale (10), since a step that noise or a slow wander bends looks like a short
#: ramp. At 10, 2 of the main evaluation's 400 series (which plant no drift) read a step as
#: one and its F1 fell from 0.8548 to 0.8493; at 15, none do and the drift tests hold.
_RAMP_EVIDENCE = 15.0
#: How much a step on a ramp must lower it to be kept: "very strong" evidence. Every added
#: step lowers the residual, and a spurious one bends the ramp's slope.
_STEP_EVIDENCE = 10.0


@dataclass(frozen=True)
class Drift:
    """A sustained slope. ``start`` is the last point at the old level (the slope begins
    after it) and ``end`` the first at the new one; ``ongoing`` when the slope reaches the
    newest point. ``slope_pct`` is the change per point and ``total_pct`` over the whole
    ramp, both in percent of the level (signed like a change point's magnitude)."""

    start: int
    end: int
    direction: str
    slope_pct: float
    total_pct: float
    ongoing: bool


@dataclass(frozen=True)
class _Fit:
    rss: float
    params: int
    start: int
    end: int
    slope: float
    steps: tuple[tuple[int, float], ...]


def explain(
    x: np.ndarray,
    points: tuple[ChangePoint, ...],
    sigma: float,
    floors: Floors,
    config: DetectorConfig,
) -> tuple[ChangePoint, ...]:
    """``points`` (the scan's change points of the log badness ``x``, sorted by index) with
    each run the ramp explains better replaced by its drift's change point (and the steps on
    top of it)."""
    kept: list[Any] = []
    sign = 1.0 if config.lower_is_better else -1.0
    for group, (lo, hi) in _groups(points, x.size, config):
        found = _explained(x[lo:hi], [cp.index - lo for cp in group], sigma, floors, config)
        if found is None:
            kept += group
            continue
        drift = Drift(
            start=found.start + lo,
            end=found.end + lo,
            direction="regression" if found.slope > 0 else "improvement",
            slope_pct=math.expm1(sign * found.slope) * 100.0,
            total_pct=math.expm1(sign * found.slope * (found.end - found.start)) * 100.0,
            ongoing=found.end + lo >= x.size - 1,
        )
        # The drift is also the change point where the level started to move, with the
        # whole ramp's change: what every reader of change points (the history net's
        # alerts, serving's judge) then sees as one finding. Its evidence: the points before
        # the ramp against those after it.
        before = x[max(lo, drift.start - config.window + 1) : drift.start + 1]
        after = x[drift.end : min(hi, drift.end + config.window)]
        effect, p_value = rank_test(before, after) if after.size else (0.0, 1.0)
        kept.append(
            replace(
                group[0],
                index=drift.start + 1,
                direction=drift.direction,
                magnitude_pct=drift.total_pct,
                p_value=p_value,
                effect=effect,
                cause="unknown",
                drift=drift,
            )
        )
        for at, height in found.steps:
            effect, p_value = rank_test(*_around(x[lo:hi], at, found, config))
            kept.append(
                replace(
                    group[0],
                    index=at + lo,
                    direction="regression" if height > 0 else "improvement",
                    magnitude_pct=math.expm1(sign * height) * 100.0,
                    p_value=p_value,
                    effect=effect,
                    cause="unknown",
                )
            )
    return tuple(sorted(kept, key=lambda cp: cp.index))


def _groups(
    points: tuple[ChangePoint, ...], n: int, config: DetectorConfig
) -> list[tuple[list[ChangePoint], tuple[int, int]]]:
    """Runs of consecutive same-direction change points, each with the span of points it is
    judged on: up to ``window`` points either side, not past the neighbouring runs."""
    runs: list[list[ChangePoint]] = []
    for cp in points:
        if runs and runs[-1][-1].direction == cp.direction:
            runs[-1].append(cp)
        else:
            runs.append([cp])
    spans = []
    for i, run in enumerate(runs):
        lo = max(runs[i - 1][-1].index if i else 0, run[0].index - config.window)
        hi = min(runs[i + 1][0].index if i + 1 < len(runs) else n, run[-1].index + config.window)
        spans.append((run, (lo, hi)))
    return spans


def _explained(
    y: np.ndarray, steps_at: list[int], sigma: float, floors: Floors, config: DetectorConfig
) -> _Fit | None:
    """The ramp fit of ``y`` when it beats the scan's steps at ``steps_at``, else None."""
    n = y.size
    shortest = 2 * config.min_size
    if n < shortest + 2:
        return None
    first, last = min(steps_at), max(steps_at)
    starts = range(max(0, first - config.window), first + 1)
    ends = range(last, min(n - 1, last + config.window) + 1)
    keep = np.ones(n, dtype=bool)
    for _ in range(2):  # fit, leave the slow outliers out, fit again
        ramp = _grid(y, keep, starts, ends, (), shortest)
        if ramp is None:
            return None
        keep = _residual(y, ramp, keep) <= _OUTLIER_SIGMAS * max(sigma, 1e-12)
    used = int(keep.sum())
    steps = _steps_rss(y, keep, steps_at)
    if not _wins(ramp.rss, ramp.params, steps, 2 * len(steps_at) + 1, used, _RAMP_EVIDENCE):
        return None
    fit = _with_steps(y, keep, ramp, starts, ends, shortest, config)
    if fit.steps:  # is the ramp still needed beside the steps it found?
        flat = _steps_rss(y, keep, [a for a, _ in fit.steps])
        if not _wins(fit.rss, fit.params, flat, 2 * len(fit.steps) + 1, used, _RAMP_EVIDENCE):
            return None
    confirmed = tuple(at for at, height in fit.steps if abs(height) >= floors.magnitude)
    if len(confirmed) < len(fit.steps):  # the ramp without the steps that did not stand
        fit = _grid(y, keep, starts, ends, confirmed, shortest) or ramp
    if abs(fit.slope) * (fit.end - fit.start) < floors.magnitude:
        return None
    return fit


def _with_steps(
    y: np.ndarray,
    keep: np.ndarray,
    ramp: _Fit,
    starts: range,
    ends: range,
    shortest: int,
    config: DetectorConfig,
) -> _Fit:
    """``ramp`` with up to two steps on top of it, each where it lowers the information
    criterion most (on or next to the ramp, ``min_size`` apart), while one does."""
    n, width = y.size, config.min_size
    used = int(keep.sum())
    fit = ramp
    for _ in range(_MAX_STEPS):
        taken = [a for a, _ in fit.steps]
        candidates = [
            j
            for j in range(max(width, fit.start - width), min(n - width, fit.end + width) + 1)
            if all(abs(j - a) >= width for a in taken)
        ]
        tried = [_grid(y, keep, starts, ends, (*taken, j), shortest) for j in candidates]
        better = [f for f in tried if f is not None]
        if not better:
            break
        best = min(better, key=lambda f: _bic(f.rss, f.params, used))
        if not _wins(best.rss, best.params, fit.rss, fit.params, used, _STEP_EVIDENCE):
            break
        fit = best
    return fit


def _grid(
    y: np.ndarray,
    keep: np.ndarray,
    starts: range,
    ends: range,
    steps: tuple[int, ...],
    shortest: int,
) -> _Fit | None:
    """The least-squares ramp from ``s`` to ``e`` (over the grid, ``e - s >= shortest``) with
    a level shift at each of ``steps``: every candidate's slope in closed form, after the
    level and the steps are projected out."""
    t = np.arange(y.size, dtype=float)[keep]
    yk = y[keep]
    pairs = [(s, e) for s in starts for e in ends if e - s >= shortest]
    if not pairs:
        return None
    s_arr = np.array([p[0] for p in pairs], dtype=float)[:, None]
    e_arr = np.array([p[1] for p in pairs], dtype=float)[:, None]
    ramps = np.clip(t[None, :] - s_arr, 0.0, e_arr - s_arr)
    base = np.column_stack([np.ones(t.size), *[(t >= a).astype(float) for a in steps]])
    q, _ = np.linalg.qr(base)
    y_res = yk - q @ (q.T @ yk)
    r_res = ramps - (ramps @ q) @ q.T
    sxx = np.einsum("ij,ij->i", r_res, r_res)
    sxy = r_res @ y_res
    valid = sxx > 1e-12
    if not valid.any():
        return None
    rss = np.where(valid, float(y_res @ y_res) - sxy**2 / np.where(valid, sxx, 1.0), np.inf)
    best = int(np.argmin(rss))
    s, e = pairs[best]
    slope = float(sxy[best] / sxx[best])
    # The steps' heights given that slope: least squares of what the ramp leaves.
    left = yk - slope * ramps[best]
    coef, *_ = np.linalg.lstsq(base, left, rcond=None)
    heights = tuple((a, float(h)) for a, h in zip(steps, coef[1:], strict=True))
    return _Fit(float(rss[best]), 4 + 2 * len(steps), s, e, slope, heights)


def _residual(y: np.ndarray, fit: _Fit, keep: np.ndarray) -> np.ndarray:
    """What ``fit`` leaves of ``y`` at every point, its level the median over the kept
    points (so the slow outliers stand out on one side)."""
    t = np.arange(y.size, dtype=float)
    shape = fit.slope * np.clip(t - fit.start, 0.0, fit.end - fit.start)
    for at, height in fit.steps:
        shape = shape + height * (t >= at)
    left = y - shape
    return left - float(np.median(left[keep]))


def _steps_rss(y: np.ndarray, keep: np.ndarray, steps_at: list[int]) -> float:
    """The residual sum of squares of a level per regime between ``steps_at``."""
    t = np.arange(y.size)[keep]
    base = np.column_stack([np.ones(t.size), *[(t >= a).astype(float) for a in steps_at]])
    coef, *_ = np.linalg.lstsq(base, y[keep], rcond=None)
    residual = y[keep] - base @ coef
    return float(residual @ residual)


def _wins(rss: float, params: int, other_rss: float, other_params: int, n: int, by: float) -> bool:
    """Whether a fit's information criterion is at least ``by`` below the other's."""
    return _bic(rss, params, n) <= _bic(other_rss, other_params, n) - by


def _bic(rss: float, params: int, n: int) -> float:
    return n * math.log(max(rss, 1e-300) / n) + params * math.log(n)


def _around(
    y: np.ndarray, at: int, fit: _Fit, config: DetectorConfig
) -> tuple[np.ndarray, np.ndarray]:
    """The points either side of a step on a drift, up to ``window`` of them and not past
    the fit's other steps, the drift taken out, for its rank test."""
    t = np.arange(y.size, dtype=float)
    flat = y - fit.slope * np.clip(t - fit.start, 0.0, fit.end - fit.start)
    others = [a for a, _ in fit.steps if a != at]
    lo = max([0, at - config.window, *(a for a in others if a < at)])
    hi = min([y.size, at + config.window, *(a for a in others if a > at)])
    return flat[lo:at], flat[at:hi]
