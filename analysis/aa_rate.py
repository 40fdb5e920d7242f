"""The A/B rule's false-alarm rate, measured: free A/A pairs from the nightly history.

Two consecutive nightly measurements of one series (a case on one GPU model) whose build
identity is the same (``analysis/build_identity.py``) ran the same GPU work: any difference
the A/B rule finds between them is a false alarm. Each nightly pass judges the newest such
pair of every series (``aa_pair``); the rate per pool and GPU model is the share of pairs
judged SLOWER or FASTER (``aa_rates``). The rule states its rate, the rank test's
``alpha``; a pool whose measured rate is above it beyond chance (a one-sided binomial test
at ``FLAG_P``) is flagged: its verdicts cry wolf more often than the rule says. Nightly pairs
are not interleaved, so what moves between nights (a driver, clocks, a neighbour) counts;
that is the rate a pool's users get.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from scipy.special import bdtrc

from kernelwatch.analysis.shift_test import SampledRun, counted_samples
from kernelwatch.analysis.thresholds import VerdictConfig
from kernelwatch.analysis.verdict import ABVerdict, compare

#: How unlikely a pool's count of false alarms must be under the stated rate to flag it.
FLAG_P = 0.01
#: The verdicts that call two measurements different.
DIFFERENT = ("SLOWER", "FASTER")


class HistoryPoint(SampledRun, Protocol):
    """What a pair is judged from: one stored nightly measurement."""

    @property
    def pool(self) -> str | None: ...

    @property
    def build_identity(self) -> str | None: ...


def aa_pair(points: Sequence[HistoryPoint], config: VerdictConfig) -> ABVerdict | None:
    """The A/B verdict on the last two of a series' ``points`` (oldest first) when they are
    an A/A pair: both measured, on the same pool, with the same known build identity; None
    otherwise (or when either has too few samples to judge)."""
    if len(points) < 2:
        return None
    a, b = points[-2], points[-1]
    same = a.build_identity is not None and a.build_identity == b.build_identity
    if not same or a.pool != b.pool or a.status != "ok" or b.status != "ok":
        return None
    a_ns, a_clock = counted_samples(a)
    b_ns, b_clock = counted_samples(b)
    if min(a_ns.size, b_ns.size) < 2:
        return None
    both = a_clock is not None and b_clock is not None
    return compare(a_ns, b_ns, config, a_clock if both else None, b_clock if both else None)


@dataclass(frozen=True)
class AAJudged:
    """One judged A/A pair: where it ran and what the rule said."""

    pool: str
    device_model: str
    verdict: str


@dataclass(frozen=True)
class AARate:
    """The measured false-alarm rate of one pool on one GPU model (``device_model`` "" for
    the whole pool): ``different`` of ``pairs`` judged SLOWER or FASTER, against the rule's
    ``stated`` rate; ``flagged`` when that many is unlikely (``p_value`` below
    :data:`FLAG_P`) had the rate been the stated one."""

    pool: str
    device_model: str
    pairs: int
    different: int
    rate: float
    stated: float
    p_value: float
    flagged: bool


def aa_rates(judged: Iterable[AAJudged], stated: float) -> list[AARate]:
    """The rate per pool and GPU model, and per pool (model ""), sorted by pool then model."""
    counts: dict[tuple[str, str], list[int]] = {}
    for pair in judged:
        for key in ((pair.pool, pair.device_model), (pair.pool, "")):
            count = counts.setdefault(key, [0, 0])
            count[0] += 1
            count[1] += pair.verdict in DIFFERENT
    rates = []
    for (pool, model), (pairs, different) in sorted(counts.items()):
        # One-sided binomial test, P(X >= different): scipy.special, not scipy.stats, whose
        # import (0.8 s of CPU) every flow command would pay for this one number.
        p = bdtrc(different - 1, pairs, stated) if different else 1.0
        rates.append(
            AARate(pool, model, pairs, different, different / pairs, stated, float(p), p < FLAG_P)
        )
    return rates
