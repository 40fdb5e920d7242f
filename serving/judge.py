"""Judging serving results like kernel history: change points per deployment and metric (the
kernel detector, told which direction is better), and an A/B verdict between two runs from
their per-request samples (the kernel A/B's rank test and bootstrap, on p50 and p99).

Pure: the store reads the history and samples, this decides, the store writes what it found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from kernelwatch.analysis.changepoints import Direction, detect
from kernelwatch.analysis.thresholds import DetectorConfig, VerdictConfig
from kernelwatch.analysis.verdict import ABVerdict, compare
from kernelwatch.serving.results import HistoryPoint, lower_is_better

#: The serving A/B's margin: two runs within 3% of each other on a statistic are the SAME.
#: Serving numbers move more than a kernel's between runs of one build (batching, the
#: request mix's order); TensorRT-LLM's gate is 5%.
SERVING_MARGIN = 0.03
#: The quantiles an A/B compares, by name.
STATISTICS: Mapping[str, float] = {"p50": 0.5, "p99": 0.99}
#: Per-request samples a side is judged on at most: a run of 1,000 requests of 500 tokens
#: has half a million gaps. 20,000 pin a p99 to about 1% (two hundred samples above it)
#: in a few seconds; a seeded subsample of them widens the interval, never narrows it.
MAX_AB_SAMPLES = 20_000

_DEFAULT = DetectorConfig()


@dataclass(frozen=True)
class ServingChange:
    """A change in one metric of a deployment's history: from ``previous`` (the last run of
    the old level) to ``run`` (the first of the new), with the kernel commits each served.
    ``magnitude_pct`` is the signed change of the level; ``direction`` says whether it is
    worse (a latency up, a throughput down) or better."""

    metric: str
    run: HistoryPoint
    previous: HistoryPoint
    direction: Direction
    magnitude_pct: float
    p_value: float
    provisional: bool


def changes(
    history: Sequence[HistoryPoint], metric: str, config: DetectorConfig = _DEFAULT
) -> list[ServingChange]:
    """The change points of one metric's history (ok runs in time order): settled ones and
    a provisional one in the newest runs. Runs whose value is not above 0 (a latency a
    tool could not measure) are left out, as the detector needs positive values."""
    points = [p for p in history if p.value > 0]
    judged = replace(config, lower_is_better=lower_is_better(metric))
    found = detect([p.value for p in points], judged, provisional=True)
    return [
        ServingChange(
            metric=metric,
            run=points[cp.index],
            previous=points[cp.index - 1],
            direction=cp.direction,
            magnitude_pct=cp.magnitude_pct,
            p_value=cp.p_value,
            provisional=cp.provisional,
        )
        for cp in found.change_points
    ]


@dataclass(frozen=True)
class ServingAB:
    """Run B against run A on one latency's per-request samples, at one statistic."""

    latency: str
    statistic: str
    verdict: ABVerdict


def compare_runs(
    a: Mapping[str, np.ndarray], b: Mapping[str, np.ndarray], margin: float = SERVING_MARGIN
) -> list[ServingAB]:
    """B against A on every latency both runs have samples of, at p50 and p99. Raises
    ValueError when they share none (a run stored without ``--save-detailed``)."""
    shared = [latency for latency in a if latency in b]
    if not shared:
        raise ValueError(
            "the two runs share no per-request samples: run the benchmarks with "
            "--save-detailed (vLLM) or --output-details (SGLang)"
        )
    config = VerdictConfig(margin=margin)
    return [
        ServingAB(
            latency, name, compare(_capped(a[latency]), _capped(b[latency]), config, quantile=q)
        )
        for latency in shared
        for name, q in STATISTICS.items()
    ]


def _capped(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    values = values[values > 0]  # a zero gap (two tokens in one chunk) has no log
    if values.size <= MAX_AB_SAMPLES:
        return values
    return np.random.default_rng(0).choice(values, MAX_AB_SAMPLES, replace=False)


@dataclass(frozen=True)
class ServingFinding:
    """The serving regression one run opens: the metrics that got worse at it (one run, one
    deployment: a kernel or engine change moves several at once), the run before, and the
    alert's title and magnitude (the worst change, signed as the metric moved)."""

    run: HistoryPoint
    previous: HistoryPoint
    changes: tuple[ServingChange, ...]
    title: str
    magnitude: float
    provisional: bool


def findings(deployment: str, found: Sequence[ServingChange]) -> list[ServingFinding]:
    """The regressions to open for ``found`` (a deployment's changes of every judged
    metric): one per run that made any metric worse; improvements open none."""
    by_run: dict[int, list[ServingChange]] = {}
    for change in found:
        if change.direction == "regression":
            by_run.setdefault(change.run.run_pk, []).append(change)
    result = []
    for group in by_run.values():
        group.sort(key=lambda c: -abs(c.magnitude_pct))
        worst = group[0]
        provisional = all(c.provisional for c in group)
        moved = ", ".join(f"{c.metric} {c.magnitude_pct:+.1f}%" for c in group)
        title = (
            f"serving {deployment}: {moved} at kernel {worst.run.kernel_commit[:12]} "
            f"(was {worst.previous.kernel_commit[:12]})" + (" (provisional)" if provisional else "")
        )
        result.append(ServingFinding(worst.run, worst.previous, tuple(group), title,
                                     worst.magnitude_pct / 100.0, provisional))  # fmt: skip
    return sorted(result, key=lambda f: (f.run.started_at, f.run.run_pk))
