"""Interleaved A/B timing of two implementations of the same spec on one device.

A and B are sampled alternately (A B A B ...) through one timer, so clock drift, thermal
state and neighbours hit both alike: the primitive PR checks and bisection build on. It
returns both raw sample sets and their statistics; deciding FASTER/SLOWER/SAME is the job
of ``analysis/``. :func:`interleave` is the pure part; :func:`measure_ab` the thin device
layer that builds the two launches from two specs (e.g. the suite at two commits, imported
side by side) on the same inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from kernelwatch.harness.bench import prepare
from kernelwatch.harness.device import Device
from kernelwatch.harness.records import CaseId, LaunchConfig, Method, Summary
from kernelwatch.harness.sampling import Collected, Sample, StopRule, collect, summarize
from kernelwatch.harness.spec import KernelSpec
from kernelwatch.harness.telemetry import Probe
from kernelwatch.harness.timing import Timer, time_arms


@dataclass(frozen=True)
class ABResult:
    """Both sample sets in the order taken, their statistics, and why sampling stopped.
    ``ratio`` is B's median over A's (above 1: B is slower)."""

    a: tuple[Sample, ...]
    b: tuple[Sample, ...]
    a_summary: Summary | None
    b_summary: Summary | None
    stop: str
    method: Method | None = None
    a_config: LaunchConfig | None = None
    b_config: LaunchConfig | None = None

    @property
    def ratio(self) -> float | None:
        if self.a_summary is None or self.b_summary is None:
            return None
        return self.b_summary.median_ns / self.a_summary.median_ns


def interleave(
    a: Callable[[], Sample],
    b: Callable[[], Sample],
    rule: StopRule,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> ABResult:
    """Sample A and B alternately until both meet ``rule`` (or time runs out)."""
    return _result(collect([a, b], rule, clock, pause), rule)


def _result(
    collected: Collected,
    rule: StopRule,
    method: Method | None = None,
    configs: tuple[LaunchConfig | None, LaunchConfig | None] = (None, None),
) -> ABResult:
    a, b = collected.arms
    return ABResult(
        a,
        b,
        summarize(a, collected.stop, rule.confidence),
        summarize(b, collected.stop, rule.confidence),
        collected.stop,
        method,
        *configs,
    )


def measure_ab(
    spec_a: KernelSpec,
    spec_b: KernelSpec,
    case: CaseId,
    device: Device,
    timer: Timer,
    probe: Probe,
    rule: StopRule,
    warmup_s: float,
    seed: int = 0,
) -> ABResult:
    """Time ``spec_a`` and ``spec_b`` interleaved on the same inputs (made by ``spec_a``),
    each at the config its first launch chose."""
    first = prepare(spec_a, case, device, seed, None)
    second = prepare(spec_b, case, device, seed, None, inputs=first.inputs)
    collected, _ = time_arms([first.kernel, second.kernel], timer, probe, rule, warmup_s)
    return _result(collected, rule, timer.method, (first.config, second.config))
