"""Change points in one series of per-commit times, in commit order, batch and incremental.

The method (docs/DETECTION.md gives the reasoning and the evaluation):

1. Work on log times: GPU noise is multiplicative, and shifts become relative.
2. Scan: at every split k, a Mann-Whitney statistic between the ``window`` points before and
   the ``window`` points after k. Ranks ignore how far an outlier or a throttled point sits;
   the bounded window keeps slow drift from accumulating into a "change".
3. Candidates are the local maxima of |z|, strongest first. Each is confirmed (rank test p,
   Cliff's delta and a noise-aware minimum magnitude) on the raw points between its
   neighbouring change points, at most ``window`` either side; then the weakest change point
   that no longer passes against its final neighbours is dropped, until all pass (Otava's
   bottom-up merge, with a rank test instead of Student's t).
4. With SM clocks per point, each change is tested again in cycle space (time x clock): one
   that vanishes there is labelled ``environment`` rather than ``code``.

Cost is O(n * window^2) comparisons, vectorised: a few milliseconds for a year of nightlies.
The incremental form (``History``/``append``) keeps only a bounded tail, so a new nightly
point costs the same whatever the length of the history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import Literal

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from kernelwatch.analysis.drift import Drift, explain
from kernelwatch.analysis.noise import relative_noise
from kernelwatch.analysis.shift_test import Confirmation, Floors, confirm_shift, cycles
from kernelwatch.analysis.tail import TailRule, TailShift, tail_magnitude_pct, tail_shift
from kernelwatch.analysis.thresholds import DetectorConfig

Cause = Literal["code", "environment", "unknown"]
Direction = Literal["regression", "improvement"]
_DEFAULT = DetectorConfig()


@dataclass(frozen=True)
class ChangePoint:
    """A confirmed change. ``index`` is the first point of the new regime; ``magnitude_pct``
    is the signed change of the median level (after vs before) in percent. ``provisional``:
    found in the newest points only (``tail.py``), before enough points follow it for the
    scan to settle it."""

    index: int
    direction: Direction
    magnitude_pct: float
    p_value: float
    effect: float
    cause: Cause
    provisional: bool = False
    drift: Drift | None = None
    """Set when the change is a sustained slope rather than a step (``drift.py``): ``index``
    is then the first point that moved and ``magnitude_pct`` the whole ramp's change."""


@dataclass(frozen=True)
class Detection:
    """The verdict on one series: ``status`` is ``ok`` or ``too_short`` (fewer than two
    regimes' worth of points: no judgement, which is not the same as no change).
    ``noise_pct`` is the series' relative point-to-point noise."""

    status: Literal["ok", "too_short"]
    n: int
    noise_pct: float
    change_points: tuple[ChangePoint, ...]
    withdrawn: tuple[ChangePoint, ...] = ()
    """Provisional changes an earlier night reported that the newest points contradict
    (the level returned): said once more, so a change never vanishes without a reason."""

    @property
    def drifts(self) -> tuple[Drift, ...]:
        """The changes that are sustained slopes, each in place of the scan's steps it
        explains (``drift.py``)."""
        return tuple(cp.drift for cp in self.change_points if cp.drift is not None)


def detect(
    y: np.ndarray | list[float],
    config: DetectorConfig = _DEFAULT,
    clock_mhz: np.ndarray | list[float] | None = None,
    provisional: bool = False,
) -> Detection:
    """Change points of one series of positive times in commit order.

    ``clock_mhz`` (SM clock per point, parallel to ``y``) enables the cycle-space check.
    ``provisional`` also reports a change in the newest points that the scan cannot judge
    yet (``config.tail_points`` or more points beyond ``config.tail_z`` noise sigmas),
    marked provisional. Raises ValueError on non-positive or non-finite values.
    """
    # Work on "badness": log time, or minus log rate, so slower is always larger (the side
    # the one-sided GPU noise falls on, which confirm.trim_slow_tail relies on).
    x = _log_values(y) * (1.0 if config.lower_is_better else -1.0)
    clocks = None if clock_mhz is None else np.asarray(clock_mhz, dtype=float)
    if clocks is not None and clocks.shape != x.shape:
        raise ValueError(f"clock_mhz has {clocks.size} values for {x.size} points; pass one each")
    if x.size < 2 * config.min_size:
        return Detection("too_short", int(x.size), 0.0, ())
    sigma = relative_noise(x)
    floors = Floors(
        alpha=config.alpha,
        magnitude=max(config.min_magnitude, config.noise_factor * sigma),
        effect=config.min_effect,
    )
    found = _segment(x, config, floors, sigma)
    log_cycles = None if clocks is None else cycles(x, clocks)
    points = tuple(
        _describe(k, conf, _cause(log_cycles, found, k, config, floors), config)
        for k, conf in found.items()
    )
    points = _split_short_regimes(x, points, sigma, floors.magnitude, config)
    points = explain(x, points, sigma, floors, config)
    withdrawn: tuple[ChangePoint, ...] = ()
    if provisional and config.tail_points:
        tail = _provisional(x, sorted(map(_regime_start, points)), sigma, floors.magnitude, config)
        standing, withdrawn = _still_standing(x, points, tail, sigma, floors.magnitude, config)
        points += standing
    return Detection("ok", int(x.size), float(sigma * 100.0), points, withdrawn)


#: The fewest points a short regime of its own holds: throttling and interference bursts
#: last 1-3 nights (the evaluation's noise model, tests/synthetic_series.py, draws them so),
#: and a burst right after a step looks like a level of its own.
_SHORT_REGIME = 4


def _split_short_regimes(
    x: np.ndarray,
    points: tuple[ChangePoint, ...],
    sigma: float,
    min_shift: float,
    config: DetectorConfig,
) -> tuple[ChangePoint, ...]:
    """Each change whose first few points (fewer than ``min_size``, which the scan cannot
    place a second change inside) form a level of their own, neither the one before nor the
    one after: a partial revert (+10 %, then -6 % four nights later) is two changes with
    their own magnitudes, at their own starts, not one +4 % change. Both sides of the short
    regime must pass the tail's rule, and the levels before and after it must differ, so a
    burst that returns to the old level (throttling, interference) is not split."""
    sign = 1.0 if config.lower_is_better else -1.0
    out: list[ChangePoint] = []
    starts = [cp.index for cp in points]
    for i, cp in enumerate(points):
        k = cp.index
        end = starts[i + 1] if i + 1 < len(starts) else x.size
        begin = max(starts[i - 1] if i else 0, k - config.window)
        before = x[begin:k]
        best: tuple[float, int, TailShift, TailShift] | None = None
        for s in range(max(config.tail_points, _SHORT_REGIME), config.min_size):
            after = x[k + s : min(end, k + s + config.window)]
            if after.size < config.min_size:
                break
            short = x[k : k + s]
            rule = replace(_tail_rule(min_shift, config), min_points=s, max_points=s)
            into = tail_shift(np.concatenate([before, short]), rule, sigma)
            out_of = tail_shift(np.concatenate([after, short]), rule, sigma)
            if into is None or out_of is None:
                continue
            if abs(float(np.median(after)) - float(np.median(before))) < min_shift:
                continue
            score = abs(float(np.mean(short)) - float(np.median(after))) * math.sqrt(s)
            if best is None or score > best[0]:
                best = (score, s, into, out_of)
        if best is None:
            out.append(cp)
            continue
        _, s, into, out_of = best
        out.append(replace(cp, magnitude_pct=math.expm1(sign * into.shift) * 100.0))
        back = -out_of.shift  # the level after against the short regime's
        out.append(
            ChangePoint(
                index=k + s,
                direction="regression" if back > 0 else "improvement",
                magnitude_pct=math.expm1(sign * back) * 100.0,
                p_value=out_of.p_value,
                effect=-out_of.effect,
                cause="unknown",
                provisional=cp.provisional,
            )
        )
    return tuple(out)


def _still_standing(
    x: np.ndarray,
    reported: tuple[ChangePoint, ...],
    tail: tuple[ChangePoint, ...],
    sigma: float,
    min_shift: float,
    config: DetectorConfig,
) -> tuple[tuple[ChangePoint, ...], tuple[ChangePoint, ...]]:
    """Tonight's provisional ``tail`` change, and the changes this series reported
    provisionally on earlier nights (each shorter prefix, back to the tail's reach) that
    tonight's points do not single out, with those the points contradict apart.

    A change once reported keeps where it was first reported (tonight's tail change moves to
    an earlier report of the same change nearby) and stays reported while the level since
    its start differs from the regime before it by the change floor; it is withdrawn
    ("level returned") once the newest points are back at the old level. So none flickers
    out between the tail's reach and the scan's, or wanders night to night."""
    earlier: list[ChangePoint] = []
    for h in range(_tail_rule(min_shift, config).max_points, 0, -1):
        prefix = x[: x.size - h]
        if prefix.size >= 2 * config.min_size:
            settled = [_regime_start(cp) for cp in reported if _regime_start(cp) < prefix.size]
            earlier += _provisional(prefix, settled, sigma, min_shift, config)

    def standing(cp: ChangePoint) -> ChangePoint | None:
        # Judged against its own regime: since the last reported change before it.
        start = max(
            [
                0,
                cp.index - config.window,
                *(_regime_start(r) for r in reported if _regime_start(r) < cp.index),
            ]
        )
        level = float(np.median(x[start : cp.index]))
        sign = 1.0 if cp.direction == "regression" else -1.0
        shift = float(np.median(x[cp.index :])) - level
        newest = float(np.median(x[-config.tail_points :])) - level
        if sign * shift < min_shift or sign * newest < min_shift / 2:
            return None
        # Every point since its start judged again by the tail's own rule: a change noise
        # made on one night does not pass it once more nights follow.
        since = x.size - cp.index
        rule = replace(_tail_rule(min_shift, config), max_points=since)
        again = tail_shift(x, rule, sigma, regime_start=start)
        if again is None or again.direction != cp.direction:
            return None
        if abs(again.start - cp.index) > config.min_size // 2:
            return None
        pct = math.expm1(shift if config.lower_is_better else -shift) * 100.0
        return replace(cp, magnitude_pct=pct)

    def same(a: ChangePoint, b: ChangePoint) -> bool:
        return a.direction == b.direction and abs(a.index - b.index) <= config.min_size

    kept: list[ChangePoint] = []
    for cp in tail:
        first = next((s for e in earlier if same(e, cp) and (s := standing(e))), None)
        kept.append(first or cp)
    withdrawn: list[ChangePoint] = []
    for cp in earlier:
        if any(same(cp, other) for other in (*reported, *kept, *withdrawn)):
            continue
        still = standing(cp)
        (kept if still is not None else withdrawn).append(still or cp)
    return tuple(kept), tuple(withdrawn)


def _regime_start(cp: ChangePoint) -> int:
    """The first point of the level a change leads to: a step's own index, a drift's end."""
    return cp.index if cp.drift is None else cp.drift.end


def _tail_rule(min_shift: float, config: DetectorConfig) -> TailRule:
    """What a provisional change in the newest points must clear. Tails reach half the scan
    window, past the lag at which the scan settles a step, so that no lag falls between the
    two; a longer tail may hold noise dips back toward the old level (``TailRule.dips``), so
    a step does not vanish as it ages."""
    return TailRule(
        z=config.tail_z,
        min_shift=min_shift,
        min_points=config.tail_points,
        max_points=max(config.min_size, config.window // 2),
        min_reference=config.min_size,
        reference=config.window,
        dips=True,
    )


def _provisional(
    x: np.ndarray, settled: list[int], sigma: float, min_shift: float, config: DetectorConfig
) -> tuple[ChangePoint, ...]:
    """The change in the newest points, judged against the regime since the last settled
    change (``_tail_rule``)."""
    rule = _tail_rule(min_shift, config)
    found = tail_shift(x, rule, sigma, regime_start=settled[-1] if settled else 0)
    if found is None:
        return ()
    return (
        ChangePoint(
            index=found.start,
            direction="regression" if found.shift > 0 else "improvement",
            magnitude_pct=tail_magnitude_pct(found, config.lower_is_better),
            p_value=found.p_value,
            effect=found.effect,
            cause="unknown",
            provisional=True,
        ),
    )


def local_rank_scan(x: np.ndarray, window: int) -> np.ndarray:
    """z of the Mann-Whitney statistic for every split k = 0..n between the ``window`` points
    before k and the ``window`` points from k on (fewer at the ends); 0 where a side is empty.

    Positive z means the values after the split are larger.
    """
    n = x.size
    pad = np.full(window, np.nan)
    # Row k of the view holds x[k-window : k+window]; NaN padding compares false both ways.
    views = sliding_window_view(np.concatenate([pad, x, pad]), 2 * window)[: n + 1]
    left, right = views[:, :window], views[:, window:]
    diff = right[:, None, :] - left[:, :, None]
    net = np.count_nonzero(diff > 0, axis=(1, 2)) - np.count_nonzero(diff < 0, axis=(1, 2))
    k = np.arange(n + 1)
    n_left = np.minimum(k, window)
    n_right = np.minimum(n - k, window)
    variance = n_left * n_right * (n_left + n_right + 1) / 12.0
    z = np.zeros(n + 1)
    ok = variance > 0
    z[ok] = (net[ok] / 2.0) / np.sqrt(variance[ok])
    return z


def _segment(
    x: np.ndarray, config: DetectorConfig, floors: Floors, sigma: float
) -> dict[int, Confirmation]:
    n = x.size
    # Two scales: the full window has the power for small steps, a short one sees a regime
    # shorter than the window (a regression fixed two weeks later), whose return the full
    # window averages away. Either only nominates; the confirmation test decides.
    short = max(config.min_size, config.window // 3)
    z = np.maximum(np.abs(local_rank_scan(x, config.window)), np.abs(local_rank_scan(x, short)))
    z[: config.min_size] = 0.0
    z[n - config.min_size + 1 :] = 0.0
    # A loose cut on the scan: it only nominates splits; the confirmation test decides.
    z_min = NormalDist().inv_cdf(1.0 - min(0.5, 100 * floors.alpha) / 2.0)
    radius = config.min_size
    padded = np.pad(z, radius)
    peak = z >= sliding_window_view(padded, 2 * radius + 1).max(axis=1)
    candidates = np.flatnonzero(peak & (z >= z_min))
    accepted: list[int] = []
    for peak_at in candidates[np.argsort(-z[candidates], kind="stable")]:
        k = _locate(x, int(peak_at), accepted, config, sigma)
        if k < 0 or any(abs(k - a) < config.min_size for a in accepted):
            continue
        accepted.append(k)
    return _prune(x, sorted(accepted), config, floors)


def _locate(
    x: np.ndarray, k: int, accepted: list[int], config: DetectorConfig, sigma: float
) -> int:
    """The split near scan peak ``k`` that best fits one level either side (least absolute
    deviations from each side's median, then :func:`_refine`), or -1 when no split has a
    full regime either side.

    The rank scan saturates on a clear step (every nearby split ranks the sides apart), so
    its peak can sit a few points off; absolute deviations see the size of the jump and are
    as robust to outliers as the ranks."""
    lo, hi = neighbour_bounds(x.size, k, accepted, config.window)
    # Where near a scan peak the step may sit: a saturated peak can be a few points off,
    # but a search wider than the short scale would slide onto a neighbouring change.
    radius = config.window // 3
    splits = np.arange(
        max(lo + config.min_size, k - radius), min(hi - config.min_size, k + radius) + 1
    )
    if splits.size == 0:
        return -1
    seg = x[lo:hi]
    before = np.arange(lo, hi)[None, :] < splits[:, None]
    left = np.where(before, seg, np.nan)
    right = np.where(before, np.nan, seg)
    cost = _abs_deviation(left, splits - lo) + _abs_deviation(right, hi - splits)
    return _refine(x, int(splits[np.argmin(cost)]), lo, hi, config, sigma)


#: How far from a level a point counts in full when a split is refined, in noise sigmas
#: (``_refine``): the best F1 of 2, 2.5, 3, 4 and 5 on the evaluation's tuning seed
#: (docs/DETECTION.md).
_REFINE_CAP = 2.5


def _refine(x: np.ndarray, k: int, lo: int, hi: int, config: DetectorConfig, sigma: float) -> int:
    """The split within ``min_size`` points of ``k`` that best separates the level of the
    points before that zone (up to ``window`` of them, within ``[lo, hi)``) from the level
    of those after it, each point's distance from its side's level capped at
    ``_REFINE_CAP`` noise sigmas (``k`` itself on a tie, then the nearest to it).

    Least absolute deviations count a slow point's whole distance from the old level as
    evidence of the new one, so two interference outliers or a throttling burst just before
    a step pulled the split onto them. Capped, such a point costs the same on either side
    and only the points near one of the levels place the split. The levels come from
    outside the zone, so the points being placed do not move them (a side's own median,
    taken over points of two levels, made a cap favour splits in the middle of a short
    regime)."""
    reach = config.min_size
    start, end = max(lo, k - reach), min(hi, k + reach)
    before = x[max(lo, start - config.window) : start]
    after = x[end : min(hi, end + config.window)]
    if before.size == 0 or after.size == 0:
        return k
    cap = _REFINE_CAP * max(sigma, 1e-4)
    level_before, level_after = float(np.median(before)), float(np.median(after))
    if abs(level_after - level_before) < cap:
        # No step between the levels to place (a side reaching past a second change back to
        # the first level, or a step within the noise): the points' own noise would move it.
        return k
    zone = x[start:end]
    to_before = np.minimum(np.abs(zone - level_before), cap)
    to_after = np.minimum(np.abs(zone - level_after), cap)
    # Cost of a split at start + j: the zone's first j points at the level before, the rest
    # at the level after.
    cost = np.r_[0.0, np.cumsum(to_before)] + np.r_[np.cumsum(to_after[::-1])[::-1], 0.0]
    splits = np.arange(start, end + 1)
    allowed = (splits >= lo + config.min_size) & (splits <= hi - config.min_size)
    # A split never crosses a level of its own: _SHORT_REGIME points in a row that fit
    # neither level (a partial revert's short regime, which _split_short_regimes places);
    # a burst of slow points is shorter.
    own = np.minimum(to_before, to_after) >= cap
    for j, split in enumerate(splits):
        between = own[min(split, k) - start : max(split, k) - start]
        if _longest_run(between) >= _SHORT_REGIME:
            allowed[j] = False
    best = min(
        (float(cost[j]), abs(int(s) - k), int(s)) for j, s in enumerate(splits) if allowed[j]
    )
    # Rounding in the sums must not move a split that ties with k.
    return best[2] if best[0] < float(cost[k - start]) - 1e-12 else k


def _longest_run(flags: np.ndarray) -> int:
    """The most consecutive True values in ``flags``."""
    longest = run = 0
    for flag in flags:
        run = run + 1 if flag else 0
        longest = max(longest, run)
    return longest


def _abs_deviation(rows: np.ndarray, counts: np.ndarray) -> np.ndarray:
    # Row-wise sum of |v - median| over the non-NaN entries (``counts`` per row); sorting
    # puts NaN last, so the median sits at fixed positions (much faster than nanmedian).
    ordered = np.sort(rows, axis=1)
    r = np.arange(rows.shape[0])
    median = (ordered[r, (counts - 1) // 2] + ordered[r, counts // 2]) / 2.0
    return np.nansum(np.abs(rows - median[:, None]), axis=1)


def neighbour_bounds(n: int, k: int, points: list[int], reach: int) -> tuple[int, int]:
    """The stretch ``[lo, hi)`` of a series of ``n`` points that tests a change at ``k``: up
    to its neighbouring change points ``points``, at most ``reach`` points a side."""
    lo = max([p for p in points if p < k] + [0, k - reach])
    hi = min([p for p in points if p > k] + [n, k + reach])
    return lo, hi


def _prune(
    x: np.ndarray, points: list[int], config: DetectorConfig, floors: Floors
) -> dict[int, Confirmation]:
    # A change accepted early was tested against a neighbour that may have arrived later;
    # re-test all against their final neighbours, dropping the weakest failure each round.
    while True:
        tests = {k: _test(x, k, points, config, floors) for k in points}
        failed = [k for k, t in tests.items() if not t.confirmed]
        if not failed:
            return tests
        points.remove(max(failed, key=lambda k: tests[k].p_value))


def _test(
    x: np.ndarray, k: int, points: list[int], config: DetectorConfig, floors: Floors
) -> Confirmation:
    lo, hi = neighbour_bounds(x.size, k, points, config.window)
    return confirm_shift(x[lo:k], x[k:hi], floors)


def _cause(
    log_cycles: np.ndarray | None,
    found: dict[int, Confirmation],
    k: int,
    config: DetectorConfig,
    floors: Floors,
) -> Cause:
    if log_cycles is None:
        return "unknown"
    in_cycles = _test(log_cycles, k, sorted(found), config, floors)
    return "code" if in_cycles.confirmed else "environment"


def _describe(k: int, conf: Confirmation, cause: Cause, config: DetectorConfig) -> ChangePoint:
    sign = 1.0 if config.lower_is_better else -1.0
    return ChangePoint(
        index=k,
        direction="regression" if conf.shift > 0 else "improvement",
        magnitude_pct=math.expm1(sign * conf.shift) * 100.0,
        p_value=conf.p_value,
        effect=conf.effect,
        cause=cause,
    )


def _log_values(y: np.ndarray | list[float]) -> np.ndarray:
    values = np.asarray(y, dtype=float)
    if values.ndim != 1:
        raise ValueError("a series must be a flat list of numbers")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("a series must hold positive finite values (times or rates)")
    return np.log(values)


@dataclass(frozen=True)
class History:
    """State of the incremental detector for one series.

    ``tail`` and ``tail_clocks`` are the last points kept (at most ``4 * window``) and
    ``offset`` the index of the first of them in the whole series; ``settled`` are change
    points far enough behind the newest point that no later point can move them.
    """

    config: DetectorConfig = _DEFAULT
    offset: int = 0
    tail: tuple[float, ...] = ()
    tail_clocks: tuple[float, ...] | None = None
    settled: tuple[ChangePoint, ...] = ()

    @property
    def length(self) -> int:
        """Points seen so far."""
        return self.offset + len(self.tail)


def append(
    history: History, y: list[float], clock_mhz: list[float] | None = None
) -> tuple[History, Detection]:
    """Add new points to a series and detect over the retained tail only.

    Returns the new state and the detection for the whole series so far (settled change
    points plus those still provisional in the tail), with indices into the whole series.
    A change point settles once ``2 * window`` points follow it: its test windows are then
    full, so no new point can change its verdict.
    """
    config = history.config
    if (clock_mhz is None) != (history.tail_clocks is None) and history.tail:
        raise ValueError("pass clock_mhz with every append or with none")
    values = history.tail + tuple(float(v) for v in y)
    clocks = None
    if clock_mhz is not None:
        clocks = (history.tail_clocks or ()) + tuple(float(c) for c in clock_mhz)
    total = history.offset + len(values)
    keep = 4 * config.window
    drop = max(0, len(values) - keep)
    offset = history.offset + drop
    values = values[drop:]
    clocks = None if clocks is None else clocks[drop:]

    found = detect(values, config, clocks)
    # Points near the start of the tail lack a full left window; those changes were judged
    # (and settled) when they were in the middle of the tail.
    frontier = offset + config.window if offset > 0 else 0
    settled = list(history.settled)
    provisional = []
    for cp in found.change_points:
        absolute = replace(cp, index=cp.index + offset)
        if absolute.index < frontier or any(
            abs(absolute.index - s.index) < config.min_size for s in settled
        ):
            continue
        if absolute.index <= total - 2 * config.window:
            settled.append(absolute)
        else:
            provisional.append(absolute)
    state = History(config, offset, values, clocks, tuple(settled))
    points = tuple(settled) + tuple(provisional)
    status = "too_short" if total < 2 * config.min_size else "ok"
    return state, Detection(status, total, found.noise_pct, points)
