"""Same-GPU A/B verdicts from interleaved samples: PR checks and bisection steps.

The verdict follows an equivalence-test shape: the bootstrap confidence interval of the
ratio of medians (B / A) is compared with a margin around 1. Entirely outside the margin
(and a significant rank test) is FASTER or SLOWER; entirely inside is SAME; straddling a
margin edge is AMBIGUOUS, with the number of samples per side that would likely shrink the
interval enough to settle it. The margin is the effect-size floor: with thousands of samples
a rank test alone calls any shift significant. A serving run's tail is judged the same way
on another quantile (``quantile=0.99``: the ratio of the two sides' p99).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from kernelwatch.analysis.shift_test import counted_samples, rank_test
from kernelwatch.analysis.thresholds import VerdictConfig
from kernelwatch.harness.records import Measurement

ABVerdictName = Literal["SAME", "FASTER", "SLOWER", "AMBIGUOUS"]

# Beyond this many times the current samples an experiment is not worth proposing.
_MAX_GROWTH = 100
_DEFAULT = VerdictConfig()


@dataclass(frozen=True)
class ABVerdict:
    """The comparison of run B against run A.

    ``ratio`` is median(B) / median(A) (or the ratio of the quantile compared) with its
    bootstrap interval ``ci_low``..``ci_high``.
    ``more_samples`` (AMBIGUOUS only) is how many more samples per side would likely settle
    it; None when the difference sits on the margin, where no affordable number would.
    ``cycle_verdict`` is the same verdict in cycle space when both sides recorded clocks.
    """

    verdict: ABVerdictName
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float
    n_a: int
    n_b: int
    more_samples: int | None
    cycle_verdict: ABVerdictName | None
    reason: str


def compare(
    a_ns: np.ndarray | list[float],
    b_ns: np.ndarray | list[float],
    config: VerdictConfig = _DEFAULT,
    a_clock_mhz: np.ndarray | list[float] | None = None,
    b_clock_mhz: np.ndarray | list[float] | None = None,
    quantile: float = 0.5,
) -> ABVerdict:
    """Verdict on B against A from raw samples (positive times), taken interleaved on one
    GPU. Equal-length sides are resampled as pairs, so slow drift that hit both alike
    stays matched; with clocks for both sides the verdict is repeated in cycle space.
    ``quantile`` is the statistic compared (the median by default)."""
    if not 0.0 < quantile < 1.0:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    a, a_cycles = _log_side(a_ns, a_clock_mhz)
    b, b_cycles = _log_side(b_ns, b_clock_mhz)
    verdict = _decide(a, b, config, quantile)
    if a_cycles is not None and b_cycles is not None:
        cycle = _decide(a_cycles, b_cycles, config, quantile)
        reason = verdict.reason
        if verdict.verdict in ("FASTER", "SLOWER") and cycle.verdict == "SAME":
            reason += "; the same in cycle space, so the clock moved, not the code"
        return replace(verdict, cycle_verdict=cycle.verdict, reason=reason)
    return verdict


def compare_measurements(
    a: Measurement, b: Measurement, config: VerdictConfig = _DEFAULT
) -> ABVerdict:
    """``compare`` on two measurement records, leaving out samples flagged as throttled;
    cycle space is used when both records carry a clock per sample. When the two sides ran
    different launch configs the reason says so: the difference may be the autotuner's."""
    a_ns, a_clock = counted_samples(a)
    b_ns, b_clock = counted_samples(b)
    both = a_clock is not None and b_clock is not None
    verdict = compare(a_ns, b_ns, config, a_clock if both else None, b_clock if both else None)
    if a.config is not None and b.config is not None and a.config != b.config:
        verdict = replace(
            verdict,
            reason=f"{verdict.reason}; the configs differed (A {a.config.label()}, "
            f"B {b.config.label()}), so part of the difference may be the autotuner's choice",
        )
    return verdict


def _log_side(
    samples: np.ndarray | list[float], clocks: np.ndarray | list[float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    values = np.asarray(samples, dtype=float)
    if values.ndim != 1 or values.size < 2:
        raise ValueError("each side needs at least 2 samples")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError("samples must be positive finite times")
    log_t = np.log(values)
    if clocks is None:
        return log_t, None
    clock = np.asarray(clocks, dtype=float)
    if clock.shape != values.shape or np.any(clock <= 0):
        raise ValueError("pass one positive clock reading per sample, or none")
    return log_t, log_t + np.log(clock)


def _statistic(values: np.ndarray, quantile: float, axis: int | None = None) -> np.ndarray:
    # The median through np.median, to the bit what every kernel verdict was computed with.
    if quantile == 0.5:
        return np.median(values, axis=axis)
    return np.quantile(values, quantile, axis=axis)


def _decide(a: np.ndarray, b: np.ndarray, config: VerdictConfig, quantile: float) -> ABVerdict:
    shift = float(_statistic(b, quantile) - _statistic(a, quantile))
    low, high = _bootstrap_ci(a, b, config, quantile)
    p = _significance(a, b, quantile)
    margin = math.log1p(config.margin)
    slower = "SLOWER" if config.lower_is_better else "FASTER"
    faster = "FASTER" if config.lower_is_better else "SLOWER"
    more: int | None = None
    if low > margin and p < config.alpha:
        name: ABVerdictName = slower
        reason = f"B is {math.expm1(shift):+.2%} against A, beyond the {config.margin:.1%} margin"
    elif high < -margin and p < config.alpha:
        name = faster
        reason = f"B is {math.expm1(shift):+.2%} against A, beyond the {config.margin:.1%} margin"
    elif -margin <= low and high <= margin:
        name = "SAME"
        reason = f"the interval lies within +-{config.margin:.1%}"
    else:
        name = "AMBIGUOUS"
        more = _more_samples(shift, (high - low) / 2.0, margin, min(a.size, b.size))
        reason = f"the interval straddles the {config.margin:.1%} margin; " + (
            f"about {more} more samples per side would likely settle it"
            if more is not None
            else "the difference sits on the margin, more samples will not settle it"
        )
    return ABVerdict(
        verdict=name,
        ratio=math.exp(shift),
        ci_low=math.exp(low),
        ci_high=math.exp(high),
        p_value=p,
        n_a=int(a.size),
        n_b=int(b.size),
        more_samples=more,
        cycle_verdict=None,
        reason=reason,
    )


def _significance(a: np.ndarray, b: np.ndarray, quantile: float) -> float:
    # The median's companion is the rank test; a tail quantile's is Mood's test generalised
    # to that quantile (how many of each side lie above the pooled quantile, Fisher's exact
    # test on the 2x2 table), since a rank test sees a location shift and misses a tail
    # that grew while the body stayed put.
    if quantile == 0.5:
        return rank_test(a, b)[1]
    cut = np.quantile(np.concatenate([a, b]), quantile)
    above_a, above_b = int((a > cut).sum()), int((b > cut).sum())
    table = [[above_a, a.size - above_a], [above_b, b.size - above_b]]
    from scipy import stats  # here: the import costs every command 1.7 s of CPU

    return float(stats.fisher_exact(table).pvalue)


#: Resampled values drawn per block: the bootstrap of a serving run's 20,000 gaps would
#: need 320 MB of indices per side at once; blocks of rows keep it to 32 MB. The generator
#: yields the same indices drawn in row blocks as drawn whole, so a verdict is the same.
_BLOCK_CELLS = 4_000_000


def _bootstrap_ci(
    a: np.ndarray, b: np.ndarray, config: VerdictConfig, quantile: float
) -> tuple[float, float]:
    # Percentile bootstrap of the log ratio of the quantiles, vectorised per block.
    rng = np.random.default_rng(config.seed)
    r = config.resamples
    if a.size == b.size:
        diffs = np.concatenate([
            _statistic(b[idx], quantile, 1) - _statistic(a[idx], quantile, 1)
            for idx in _index_blocks(rng, a.size, r)
        ])  # fmt: skip
    else:
        # All of B's resamples are drawn before A's, as they always were.
        b_stats = [_statistic(b[idx], quantile, 1) for idx in _index_blocks(rng, b.size, r)]
        a_stats = [_statistic(a[idx], quantile, 1) for idx in _index_blocks(rng, a.size, r)]
        diffs = np.concatenate(b_stats) - np.concatenate(a_stats)
    tail = (1.0 - config.confidence) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    return float(low), float(high)


def _index_blocks(rng: np.random.Generator, n: int, r: int) -> Iterator[np.ndarray]:
    rows = max(1, _BLOCK_CELLS // n)
    for start in range(0, r, rows):
        yield rng.integers(0, n, (min(rows, r - start), n))


def _more_samples(shift: float, half_width: float, margin: float, n: int) -> int | None:
    # The interval's half-width shrinks as 1/sqrt(n); it settles once it no longer reaches
    # across the margin edge nearest the estimate.
    distance = abs(abs(shift) - margin)
    if distance * math.sqrt(_MAX_GROWTH) <= half_width:
        return None
    needed = n * (half_width / distance) ** 2
    return max(1, math.ceil(needed - n))
