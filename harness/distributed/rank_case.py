"""One rank's share of a distributed case: check it against the reference, or time it in
lockstep with the other ranks. Runs in a rank process (``rank.py``); rank 0 builds the
record from what every rank reports.

Correctness: every rank draws every rank's inputs (each from its own seed), computes its own
expected outputs from all of them in float64, launches twice into outputs poisoned with NaN
and then a finite sentinel, and compares (``correctness.compare``); rank 0 gathers the
comparisons. Timing: before each sample the ranks meet at a barrier; after it they agree,
by an all-reduce (MAX) on the control group, on the sample (the slowest rank's time: a
collective is as slow as its last rank), whether any rank throttled, and the elapsed time.
The stopping rule (``sampling.collect``) then sees identical samples and an identical clock
on every rank, so every rank stops after the same sample and none is left waiting.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.distributed as dist

from kernelwatch.harness.correctness import SENTINEL, Comparison, case_seed, compare
from kernelwatch.harness.device import Device
from kernelwatch.harness.distributed.bandwidth import bandwidth, interconnect_peak
from kernelwatch.harness.records import (
    ABMeasurement,
    Bandwidth,
    CaseId,
    CorrectnessResult,
    LaunchConfig,
    Measurement,
    SoftwareInfo,
    WorldInfo,
)
from kernelwatch.harness.spec import DTYPES, Comm, DistributedSpec, Params, Tensors
from kernelwatch.harness.timing.measurement import Run, ab_pair, measurement
from kernelwatch.harness.timing.request import ResolvedOptions
from kernelwatch.harness.timing.roofline import ELEMENT_BYTES
from kernelwatch.harness.timing.sampling import Sample, collect, warm_up
from kernelwatch.harness.timing.telemetry import Probe, sampled
from kernelwatch.harness.timing.timers import Timer

Step = Callable[[str], None]


@dataclass(frozen=True)
class RankContext:
    """What a rank holds for every case: its communicator, the control group the harness
    talks through, the device, the world it is part of, and (for timing) the timer."""

    comm: Comm
    control: Any
    device: Device
    world: WorldInfo
    software: SoftwareInfo


def rank_seed(seed: int, case: CaseId, rank: int) -> int:
    """Each rank's inputs of a case come from their own seed, the same on every rank."""
    digest = hashlib.sha256(f"{case_seed(seed, case)}:{rank}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def _inputs(
    spec: DistributedSpec, case: CaseId, ctx: RankContext, seed: int, rank: int
) -> dict[str, Any]:
    generator = torch.Generator(device=ctx.comm.device)
    generator.manual_seed(rank_seed(seed, case, rank))
    return spec.make_inputs(case.params, DTYPES[case.dtype], ctx.comm.device, generator, rank)


def _float64(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {
        k: v.to(torch.float64) if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in inputs.items()
    }


def _launch_poisoned(
    spec: DistributedSpec, inputs: Tensors, params: Params, ctx: RankContext, poison: float
) -> tuple[dict[str, torch.Tensor], LaunchConfig | None]:
    outputs = spec.make_outputs(inputs, params)
    for out in outputs.values():
        out.fill_(poison)
    used = spec.launch(inputs, outputs, params, ctx.comm)
    ctx.device.synchronize()
    return {name: out.detach().clone() for name, out in outputs.items()}, used


def check(
    spec: DistributedSpec, case: CaseId, tolerance: float, seed: int, ctx: RankContext, step: Step
) -> CorrectnessResult | None:
    """This rank's check of ``case``; rank 0 returns the verdict over every rank."""
    start = time.perf_counter()
    step("inputs")
    everyone = [_inputs(spec, case, ctx, seed, r) for r in range(ctx.comm.size)]
    step("reference")
    reference = spec.reference([_float64(x) for x in everyone], case.params, ctx.comm.rank)
    mine = everyone[ctx.comm.rank]
    step("launch")
    first, config = _launch_poisoned(spec, mine, case.params, ctx, float("nan"))
    second, _ = _launch_poisoned(spec, mine, case.params, ctx, SENTINEL)
    step("compare")
    result = compare(first, second, reference, tolerance, spec.deterministic)
    gathered: list[Comparison | None] = [None] * ctx.comm.size
    dist.all_gather_object(gathered, result, group=ctx.control)
    if ctx.comm.rank != 0:
        return None
    return _verdict_of_ranks(case, tolerance, seed, ctx, gathered, config, start)  # type: ignore[arg-type]


def _verdict_of_ranks(
    case: CaseId,
    tolerance: float,
    seed: int,
    ctx: RankContext,
    comparisons: Sequence[Comparison],
    config: LaunchConfig | None,
    start: float,
) -> CorrectnessResult:
    failures = [f"rank {r}: {f}" for r, c in enumerate(comparisons) for f in c.failures]
    failed = tuple(r for r, c in enumerate(comparisons) if c.failures)
    finite = all(c.rel_error is not None for c in comparisons)
    unwritten = sum(c.unwritten for c in comparisons)
    return CorrectnessResult(
        case=case,
        verdict="fail" if failures else "pass",
        reason="; ".join(failures)[:2000],
        tolerance=tolerance,
        seed=seed,
        device=ctx.device.info,
        software=ctx.software,
        rel_error=max(c.rel_error for c in comparisons) if finite else None,  # type: ignore[type-var]
        max_abs_error=max(c.max_abs_error for c in comparisons) if finite else None,  # type: ignore[type-var]
        nonfinite=sum(c.nonfinite for c in comparisons),
        unwritten=unwritten,
        deterministic=all(c.differing == 0 for c in comparisons) if unwritten == 0 else None,
        config=config,
        duration_s=time.perf_counter() - start,
        world=ctx.world,
        failed_ranks=failed,
    )


class Lockstep:
    """Samplers whose samples and clock every rank agrees on (see the module docstring)."""

    def __init__(self, control: Any) -> None:
        self._control = control
        self._start = time.monotonic()
        self._agreed = 0.0

    def clock(self) -> float:
        """The elapsed time as the slowest rank saw it at the last sample."""
        return self._agreed

    def arm(self, sampler: Callable[[], Sample]) -> Callable[[], Sample]:
        def sample() -> Sample:
            dist.barrier(group=self._control)
            taken = sampler()
            agreed = torch.tensor(
                [taken.ns, time.monotonic() - self._start, float(taken.throttled)],
                dtype=torch.float64,
            )
            dist.all_reduce(agreed, op=dist.ReduceOp.MAX, group=self._control)
            self._agreed = float(agreed[1])
            return replace(taken, ns=float(agreed[0]), throttled=bool(agreed[2]))

        return sample


@dataclass(frozen=True)
class Timing:
    """How a rank times: the timer and probe of its device and the resolved budgets."""

    timer: Timer
    probe: Probe
    options: ResolvedOptions
    baseline: bool


def _time_lockstep(
    launches: Sequence[Callable[[], object]], ctx: RankContext, timing: Timing
) -> tuple[tuple[tuple[Sample, ...], ...], Run]:
    """Every arm's samples, and the run they came from. Its statistic is left as the order
    statistics give it, not widened by the timer's step as a single-GPU case's is."""
    lock = Lockstep(ctx.control)
    samplers = [timing.timer.bind(fn) for fn in launches]
    arms = [lock.arm(sampled(sampler.take, timing.probe)) for sampler in samplers]
    for arm in arms:
        warm_up(arm, timing.options.warmup_s, clock=lock.clock)
    before = timing.probe.state()
    resolution = max(sampler.resolution_ns for sampler in samplers)
    rule = timing.options.rule
    collected = collect(arms, rule, clock=lock.clock, resolution_ns=resolution)
    states = (before, timing.probe.state())
    return collected.arms, Run(collected.stop, rule, states, timing.probe.available)


@dataclass(frozen=True)
class _Prepared:
    inputs: dict[str, Any]
    config: LaunchConfig | None
    kernel: Callable[[], object]
    baseline: Callable[[], object] | None


def _prepare(
    spec: DistributedSpec,
    case: CaseId,
    ctx: RankContext,
    seed: int,
    inputs: dict[str, Any] | None = None,
) -> _Prepared:
    """This rank's inputs, one launch (the config it fixes), and launches that repeat it."""
    inputs = inputs if inputs is not None else _inputs(spec, case, ctx, seed, ctx.comm.rank)
    outputs = spec.make_outputs(inputs, case.params)
    params, comm = case.params, ctx.comm
    config = spec.launch(inputs, outputs, params, comm)
    baseline = None
    if spec.baseline is not None:
        fn = spec.baseline.fn
        fn(inputs, params, comm)
        baseline = lambda: fn(inputs, params, comm)  # noqa: E731
    ctx.device.synchronize()
    return _Prepared(inputs, config, lambda: spec.launch(inputs, outputs, params, comm), baseline)


def bench(
    spec: DistributedSpec,
    case: CaseId,
    seed: int,
    ctx: RankContext,
    timing: Timing,
    common: dict[str, Any],
    step: Step,
) -> Measurement | None:
    """Time ``case`` in lockstep with the other ranks (its stock collective interleaved);
    rank 0 returns the measurement."""
    start = time.perf_counter()
    step("prepare")
    prepared = _prepare(spec, case, ctx, seed)
    launches = [prepared.kernel]
    with_baseline = timing.baseline and prepared.baseline is not None
    if with_baseline:
        launches.append(prepared.baseline)  # type: ignore[arg-type]
    step("timing")
    arms, run = _time_lockstep(launches, ctx, timing)
    if ctx.comm.rank != 0:
        return None
    baseline = arms[1] if with_baseline else ()
    fields = {**common, "baseline": spec.baseline.name if with_baseline else None}  # type: ignore[union-attr]
    return _measurement(spec, case, ctx, fields, prepared.config, run, arms[0], start, baseline)


def ab(
    spec_a: DistributedSpec,
    spec_b: DistributedSpec,
    case: CaseId,
    seed: int,
    ctx: RankContext,
    timing: Timing,
    common: dict[str, Any],
    step: Step,
) -> ABMeasurement | None:
    """Time ``case`` at A and B interleaved, in lockstep with the other ranks, on A's
    inputs; rank 0 returns the pair."""
    start = time.perf_counter()
    step("prepare A")
    first = _prepare(spec_a, case, ctx, seed)
    step("prepare B")
    second = _prepare(spec_b, case, ctx, seed, first.inputs)
    step("timing")
    (a, b), run = _time_lockstep([first.kernel, second.kernel], ctx, timing)
    if ctx.comm.rank != 0:
        return None
    fields = {**common, "baseline": None}
    base = _measurement(spec_a, case, ctx, fields, first.config, run, a, start)
    head = _measurement(spec_b, case, ctx, fields, second.config, run, b, start)
    return ab_pair(common, base, head, start)


def _measurement(
    spec: DistributedSpec,
    case: CaseId,
    ctx: RankContext,
    fields: dict[str, Any],
    config: LaunchConfig | None,
    run: Run,
    samples: tuple[Sample, ...],
    start: float,
    baseline: tuple[Sample, ...] = (),
) -> Measurement:
    """Rank 0's record of the agreed samples, with the collective's bus bandwidth."""

    def moved(median_ns: float) -> Bandwidth:
        return bandwidth(
            spec.collective,
            spec.message_bytes(case.params, ELEMENT_BYTES[case.dtype]),
            ctx.comm.size,
            median_ns,
            interconnect_peak(ctx.world.interconnect, ctx.device.info.name),
        )

    return measurement(
        {**fields, "world": ctx.world}, run, samples, config, "heuristic", start, baseline,
        bandwidth=moved,
    )  # fmt: skip
