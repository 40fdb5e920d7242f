"""Adaptive sampling: when to stop taking samples, and the statistic over the ones that count.

Pure logic. Samplers, the clock and the pause are passed in, so the tests drive every rule
with synthetic samples and the CUDA and CPU timers share exactly this code.

The 95% confidence interval of the median comes from order statistics (the binomial
method): with the samples sorted, ``[x_(l), x_(n-l+1)]`` covers the true median with
probability ``P(l <= B <= n-l)`` for ``B ~ Binomial(n, 1/2)``, whatever the distribution of
the samples. It is chosen over the bootstrap because it is distribution-free with exact
(conservative) coverage for independent samples, deterministic (the same samples always give
the same interval, so a record can be re-derived from its raw samples), and costs one sort,
cheap enough to re-evaluate inside the stopping loop; a bootstrap of the median needs
thousands of resamples per check, is random, and its resampled medians take only a few
distinct values, which makes its intervals erratic. Both assume independent samples; timing
samples are mildly autocorrelated, so the interval is a lower bound on the real uncertainty
(analysis compares independent runs for that reason).

Quantised samples: CUDA events resolve about 0.5 us, so a microsecond kernel's samples take a
handful of distinct values and the order statistics tie, giving a CI of zero width that says
nothing. When the samples show many ties (:func:`quantum`), the CI is widened by half a step
on each side, the most the median of quantised readings can be off; sampling then stops as
``resolution`` once the rest of the CI is under target, never as ``converged``.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import bdtr

from kernelwatch.harness.records import Summary

#: Why sampling stopped (``Summary.stop``): the CI reached its target; the timer's
#: resolution, not noise, keeps it wider (more samples would not help); the budget ran out;
#: the timeout hit before enough unthrottled samples.
CONVERGED, RESOLUTION, BUDGET, TIMEOUT = "converged", "resolution", "budget", "timeout"


@dataclass(frozen=True)
class Sample:
    """One timed launch (or one launch's share of a batch) and the device state around it.

    ``sm_clock_mhz`` is the SM clock over the sample; ``throttled`` marks a sample the device
    disturbed (``telemetry.sampled``): a clock well below the device's maximum on either side
    of it, a slowdown seen or counted over it, or another process on the GPU. It is kept in
    the record, left out of the statistic. ``throttle_reasons`` are the clock-event reasons
    NVML reported or counted over the sample; ``other_processes`` the most compute processes
    besides this one seen on the GPU around it (None: unknown).
    """

    ns: float
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    throttled: bool = False
    other_processes: int | None = None


@dataclass(frozen=True)
class StopRule:
    """When to stop sampling.

    Every arm needs ``min_samples`` unthrottled samples and ``min_time_s`` of accumulated
    measured time. Then sampling stops as soon as every arm's median CI half-width is under
    ``target_rel_ci`` of its median (``converged``), or once ``budget_s`` of wall time has
    passed (``budget``). Throttled samples do not count, so sampling may run past the budget
    to reach ``min_samples``, but never past ``timeout_s`` (``timeout``). After a throttled
    sample the sampler pauses ``throttle_pause_s``, giving the clocks time to recover.

    No defaults here: the values a device runs with are ``BenchOptions``' and
    ``DEVICE_DEFAULTS``' (``harness/timing/request.py``), declared once there.
    """

    min_samples: int
    min_time_s: float
    target_rel_ci: float
    budget_s: float
    timeout_s: float
    throttle_pause_s: float
    confidence: float = 0.95


@dataclass(frozen=True)
class Collected:
    """Every raw sample of every arm, in the order taken, and why sampling stopped."""

    arms: tuple[tuple[Sample, ...], ...]
    stop: str
    elapsed_s: float
    resolution_ns: float = 0.0


class _Arm:
    """Running totals of one arm, so each round costs O(1) outside the periodic CI check."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.counted: list[float] = []
        self.counted_ns = 0.0

    def add(self, sample: Sample) -> None:
        self.samples.append(sample)
        if not sample.throttled:
            self.counted.append(sample.ns)
            self.counted_ns += sample.ns


def collect(
    arms: Sequence[Callable[[], Sample]],
    rule: StopRule,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
    resolution_ns: float = 0.0,
) -> Collected:
    """Sample the arms round-robin (A B A B ..., so drift hits all alike) until ``rule`` says
    stop. With one arm this is plain adaptive sampling. ``resolution_ns`` is the timer's
    smallest step (0 when unknown), used when every sample of an arm is equal."""
    if not arms:
        raise ValueError("collect needs at least one arm to sample")
    stopping = _Stopping(len(arms), rule, clock(), resolution_ns)
    while True:
        for arm, totals in zip(arms, stopping.state, strict=True):
            sample = arm()
            totals.add(sample)
            if sample.throttled and rule.throttle_pause_s > 0:
                pause(rule.throttle_pause_s)
        collected = stopping.check(clock())
        if collected is not None:
            return collected


#: How long one arm's block lasts in :func:`collect_blocks` (the A/B arms in two processes):
#: long enough that a round trip to a side's process (~1 ms) is a few percent of it, short
#: against the seconds over which clocks and heat drift.
BLOCK_S = 0.02
#: The most samples in one block, however short a sample.
MAX_BLOCK = 64


def collect_blocks(
    arms: Sequence[Callable[[int], Sequence[Sample]]],
    rule: StopRule,
    clock: Callable[[], float] = time.monotonic,
    resolution_ns: float = 0.0,
    block_s: float = BLOCK_S,
) -> Collected:
    """:func:`collect` for arms that take samples in blocks (``arm(n)``: n samples, each
    followed by the throttle pause where throttled, which the arm makes itself): A's block,
    B's block, A's ... under the same stopping rule, checked after each round. The first
    round takes one sample an arm; later blocks last about ``block_s`` of wall time (the
    slowest arm's last), all arms the same count, so the arms stay as long as each other."""
    if not arms:
        raise ValueError("collect_blocks needs at least one arm to sample")
    stopping = _Stopping(len(arms), rule, clock(), resolution_ns)
    size = 1
    while True:
        slowest = 0.0
        for arm, totals in zip(arms, stopping.state, strict=True):
            began = clock()
            block = arm(size)
            if len(block) != size:
                raise ValueError(f"an arm returned {len(block)} samples for a block of {size}")
            slowest = max(slowest, (clock() - began) / size)
            for sample in block:
                totals.add(sample)
        collected = stopping.check(clock())
        if collected is not None:
            return collected
        size = max(1, min(MAX_BLOCK, int(block_s / slowest))) if slowest > 0 else MAX_BLOCK


class _Stopping:
    """The stopping rule over the arms' running totals, shared by :func:`collect` and
    :func:`collect_blocks`: checked after each round, the CI on a geometric schedule of the
    samples an arm holds."""

    def __init__(self, arms: int, rule: StopRule, start: float, resolution_ns: float) -> None:
        self.state = [_Arm() for _ in range(arms)]
        self.rule = rule
        self.start = start
        self.resolution_ns = resolution_ns
        self.next_check = rule.min_samples

    def check(self, now: float) -> Collected | None:
        """The collection once the rule says stop, else None."""
        rule, state = self.rule, self.state
        taken = len(state[0].samples)
        elapsed = now - self.start
        enough = all(len(s.counted) >= rule.min_samples for s in state)
        timed = all(s.counted_ns >= rule.min_time_s * 1e9 for s in state)
        stop = None
        # The CI needs a sort; checking on a geometric schedule keeps the loop O(n log n).
        # It is checked once more when time runs out, so a CI that converged since the last
        # check is reported as converged, not as a budget stop.
        out_of_time = elapsed >= rule.budget_s
        if enough and timed and (taken >= self.next_check or out_of_time):
            self.next_check = taken + max(1, taken // 10)
            stop = _settled(
                [s.counted for s in state], rule.target_rel_ci, rule.confidence, self.resolution_ns
            )
        if stop is None and out_of_time and enough:
            stop = BUDGET
        if stop is None and elapsed >= rule.timeout_s:
            stop = BUDGET if enough else TIMEOUT
        if stop is None:
            return None
        arms = tuple(tuple(s.samples) for s in state)
        return Collected(arms, stop, elapsed, self.resolution_ns)


def warm_up(
    sampler: Callable[[], object],
    seconds: float,
    clock: Callable[[], float] = time.monotonic,
    min_calls: int = 1,
) -> int:
    """Call ``sampler`` for at least ``seconds`` of wall time and ``min_calls`` times: clocks
    ramp up, caches and autotuners settle, lazy initialisation happens. Returns the calls."""
    start = clock()
    calls = 0
    while calls < min_calls or clock() - start < seconds:
        sampler()
        calls += 1
    return calls


def median_ci(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI of the median by order statistics (see the module docstring).

    Below 6 samples no pair of order statistics reaches 95%; the full range is returned.
    """
    if not values:
        raise ValueError("median_ci needs at least one value")
    ordered = sorted(values)
    n = len(ordered)
    lower = ci_rank(n, confidence)
    if lower < 0:
        return ordered[0], ordered[-1]
    return ordered[lower], ordered[n - 1 - lower]


@functools.lru_cache(maxsize=4096)
def ci_rank(n: int, confidence: float) -> int:
    """The 0-based index ``l`` of the lower order statistic of the median's CI: the largest
    ``k`` with ``P(B <= k) <= alpha/2`` (-1 when even the extremes fall short), found by
    bisection on the binomial CDF. ``scipy.special.bdtr``, not ``scipy.stats.binom``: that
    import costs each timing child and command about 1.7 s of CPU, for the same ranks
    (``tests/test_sampling.py``). Cached: the stopping loop asks again at each check."""
    half_alpha = (1.0 - confidence) / 2.0
    low, high = -1, n  # cdf(-1) = 0 <= alpha/2 < 1 = cdf(n)
    while high - low > 1:
        mid = (low + high) // 2
        if bdtr(mid, n, 0.5) <= half_alpha:
            low = mid
        else:
            high = mid
    return low


def quantum(values: Sequence[float], resolution_ns: float = 0.0) -> float:
    """The step quantised samples move in, or 0 when they do not look quantised.

    Samples look quantised when fewer than half of them are distinct; the step is then the
    smallest gap between distinct values, or ``resolution_ns`` when all are equal.
    """
    distinct = np.unique(np.asarray(values, dtype=float))
    if distinct.size * 2 > len(values):
        return 0.0
    if distinct.size == 1:
        return resolution_ns
    return float(np.diff(distinct).min())


def rel_ci_halfwidth(
    values: Sequence[float], confidence: float = 0.95, resolution_ns: float = 0.0
) -> float:
    """Half the CI width of the median, relative to the median (inf for a zero median),
    widened by half a step on each side when the samples are quantised."""
    return _ci_halfwidth(values, confidence, quantum(values, resolution_ns))


def _ci_halfwidth(values: Sequence[float], confidence: float, step: float) -> float:
    low, high = median_ci(values, confidence)
    return _relative_halfwidth(low - step / 2, high + step / 2, float(np.median(values)))


def _settled(
    arms: Sequence[Sequence[float]], target: float, confidence: float, resolution_ns: float
) -> str | None:
    """``converged`` when every arm's (widened) CI is within ``target``; ``resolution`` when
    every arm's CI is within target but for the quantisation; else None."""
    verdicts = []
    for values in arms:
        step = quantum(values, resolution_ns)
        if _ci_halfwidth(values, confidence, step) <= target:
            verdicts.append(CONVERGED)
        elif step and _ci_halfwidth(values, confidence, 0.0) <= target:
            verdicts.append(RESOLUTION)
        else:
            return None
    return RESOLUTION if RESOLUTION in verdicts else CONVERGED


def _relative_halfwidth(low: float, high: float, median: float) -> float:
    return (high - low) / 2.0 / median if median > 0 else math.inf


def summarize(
    samples: Sequence[Sample], stop: str, confidence: float = 0.95, resolution_ns: float = 0.0
) -> Summary | None:
    """The statistic over the unthrottled samples; None when every sample was throttled.
    The CI of quantised samples is widened by half a step each side (see the module
    docstring)."""
    counted = [s.ns for s in samples if not s.throttled]
    if not counted:
        return None
    values = np.asarray(counted, dtype=float)
    low, high = median_ci(counted, confidence)
    step = quantum(counted, resolution_ns)
    low, high = low - step / 2, high + step / 2
    median = float(np.median(values))
    return Summary(
        n=len(counted),
        median_ns=median,
        ci_low_ns=float(low),
        ci_high_ns=float(high),
        mean_ns=float(values.mean()),
        min_ns=float(values.min()),
        p10_ns=float(np.percentile(values, 10)),
        p90_ns=float(np.percentile(values, 90)),
        stop=stop,
        rel_ci_halfwidth=_relative_halfwidth(low, high, median),
    )


def summarize_collected(
    collected: Collected, arm: int = 0, confidence: float = 0.95
) -> Summary | None:
    """:func:`summarize` over one arm of a collection, at the collection's resolution."""
    return summarize(collected.arms[arm], collected.stop, confidence, collected.resolution_ns)
