"""Build the Measurement of one timed arm, and an A/B pair from its two sides.

Every timing path ends here: a ``bench`` case (``timing/case.py``), each side of an A/B pair
(``timing/ab.py``) and rank 0 of a distributed case (``distributed/rank_case.py``). A caller
hands over the arm's raw samples, the interleaved stock baseline's, how sampling stopped
and what its roofline makes of a median (speed-of-light on one GPU, bus bandwidth for a
collective); the per-sample tuples, the statistic, the verdict, the telemetry and the
speedup are made here alone, so a new per-sample field is added in this one place.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelwatch.harness.records import (
    ABMeasurement,
    Bandwidth,
    LaunchConfig,
    Measurement,
    SpeedOfLight,
    Summary,
)
from kernelwatch.harness.timing.sampling import TIMEOUT, Sample, StopRule, summarize
from kernelwatch.harness.timing.telemetry import State, describe_reasons, summarize_telemetry

#: An A/B pair's sides, in the order they are sampled.
SIDES = ("A", "B")


@dataclass(frozen=True)
class Run:
    """What one timing run says of every arm it sampled: why sampling stopped, the rule it
    stopped under, the device states read before and after, whether NVML answered
    (``telemetry``), and the timer's step, by which the CI of quantised samples is widened
    (0 leaves it as the order statistics give it)."""

    stop: str
    rule: StopRule
    states: Sequence[State]
    telemetry: bool
    resolution_ns: float = 0.0


def measurement(
    common: Mapping[str, Any],
    run: Run,
    samples: Sequence[Sample],
    config: LaunchConfig | None,
    config_source: str,
    start: float,
    baseline: Sequence[Sample] = (),
    sol: Callable[[float], SpeedOfLight] | None = None,
    bandwidth: Callable[[float], Bandwidth] | None = None,
) -> Measurement:
    """The record of one arm's ``samples``, timed interleaved with ``baseline`` (the stock
    library's samples; empty when none was timed). ``common`` holds the fields the caller
    fixes (case, method, device, software, baseline name, world); ``sol`` and ``bandwidth``
    turn the median into the roofline's verdict, asked only when a sample counted.
    ``duration_s`` runs from ``start`` (a ``time.perf_counter`` reading) to now."""
    summary = summarize(samples, run.stop, run.rule.confidence, run.resolution_ns)
    stock = summarize(baseline, run.stop, run.rule.confidence, run.resolution_ns)
    median = summary.median_ns if summary is not None else None
    status, reason = _verdict(samples, summary, run.stop, run.rule)
    return Measurement(
        status=status,
        reason=reason,
        config=config,
        config_source=config_source,
        samples_ns=tuple(s.ns for s in samples),
        sm_clock_mhz=_clocks([s.sm_clock_mhz for s in samples]),
        mem_clock_mhz=_clocks([s.mem_clock_mhz for s in samples]),
        throttled=tuple(s.throttled for s in samples),
        summary=summary,
        telemetry=summarize_telemetry(run.telemetry, samples, run.states),
        sol=sol(median) if sol is not None and median is not None else None,
        bandwidth=bandwidth(median) if bandwidth is not None and median is not None else None,
        baseline_median_ns=stock.median_ns if stock is not None else None,
        baseline_samples_ns=tuple(s.ns for s in baseline),
        baseline_throttled=tuple(s.throttled for s in baseline),
        speedup=stock.median_ns / median if stock is not None and median is not None else None,
        duration_s=time.perf_counter() - start,
        **common,
    )


def ab_pair(
    common: Mapping[str, Any], base: Measurement, head: Measurement, start: float
) -> ABMeasurement:
    """The pair of two timed sides: ``error`` naming each side that is not ``ok``."""
    failed = [f"{side}: {m.reason}" for side, m in zip(SIDES, (base, head), strict=True)
              if m.status != "ok"]  # fmt: skip
    return ABMeasurement(
        status="error" if failed else "ok",
        reason="; ".join(failed),
        base=base,
        head=head,
        duration_s=time.perf_counter() - start,
        **common,
    )


def _verdict(
    samples: Sequence[Sample], summary: Summary | None, stop: str, rule: StopRule
) -> tuple[str, str]:
    """``ok`` with an empty reason, ``ok`` with a reason when throttling left too few
    samples before the timeout, or ``error`` when every sample was throttled."""
    throttled = [s for s in samples if s.throttled]
    why = _throttling(throttled)
    if summary is None:
        return "error", (
            f"all {len(samples)} samples were taken while the GPU throttled ({why}); "
            "let it cool down and re-run"
        )
    if stop == TIMEOUT:
        return "ok", (
            f"only {summary.n} of {len(samples)} samples unthrottled "
            f"({why if throttled else 'none throttled'}) when the {rule.timeout_s:g} s "
            f"timeout hit; the statistic rests on fewer than {rule.min_samples}"
        )
    return "ok", ""


def _throttling(throttled: list[Sample]) -> str:
    """``SM clock down to 1105 MHz; reasons sw-power-cap,hw-slowdown``."""
    clocks = [s.sm_clock_mhz for s in throttled if s.sm_clock_mhz is not None]
    reasons = 0
    for s in throttled:
        reasons |= s.throttle_reasons or 0
    parts = [f"SM clock down to {min(clocks):.0f} MHz"] if clocks else []
    if reasons:
        parts.append(f"reasons {describe_reasons(reasons)}")
    shared = max((s.other_processes or 0 for s in throttled), default=0)
    if shared:
        parts.append(f"{shared} other process(es) on the GPU")
    return "; ".join(parts) or "clock below the threshold"


def _clocks(values: list[float | None]) -> tuple[float, ...]:
    # All or nothing: a tuple parallel to the samples, or empty when clocks are unknown.
    return tuple(v for v in values if v is not None) if all(v is not None for v in values) else ()
