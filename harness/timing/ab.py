"""Time one case at two commits interleaved.

:class:`ABArm` is one side of a pair in a process of its own (the kernel child's ``arm`` mode,
driven by ``harness/isolation/ab_sides.py`` in the parent): the commit under test is untrusted,
and a head that shared the base's process could patch what the base's launches and timer run
(``gc``, ``object.__setattr__``, Triton's launcher) and slow only those. Per case: fresh seeded
inputs of its own suite; one launch that fixes its config, whose outputs must be finite (a NaN
or Inf output is that case's error, as the correctness check would call it); a warm-up; blocks
of samples when the parent asks, which alternates the two sides' blocks under one stopping
rule; then its :class:`Measurement`, built by ``bench``'s
builder (``timing/measurement.py``), so the flows can store each in its own commit's run.
B launches the config A's autotuner chose when B's tuning space has it (``config_source``
``shared``): two autotuning runs that pick different configs in a near tie would otherwise
read as a code change. When B's space lacks it, B tunes itself and the verdict says the
configs differed.

:meth:`ABSession.measure_pair` times both sides in one process, sample by sample through
one timer (``timing.time_arms``), on A's inputs: the distributed cases' ranks
(``distributed/rank_case.py``) and the tests that need no second process.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Mapping
from typing import Any

import torch

from kernelwatch.harness.device import Device
from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    LaunchConfig,
    Measurement,
    SoftwareInfo,
)
from kernelwatch.harness.spec import KernelSpec, KernelUnsupported
from kernelwatch.harness.suite import Task
from kernelwatch.harness.timing.case import BenchSession, Prepared, Work, prepare, work
from kernelwatch.harness.timing.measurement import Run, ab_pair
from kernelwatch.harness.timing.pinning import pinned_config
from kernelwatch.harness.timing.sampling import Sample, warm_up
from kernelwatch.harness.timing.telemetry import State, sampled

#: ``config_source`` of a B side launching the config A's autotuner chose.
SHARED = "shared"


class ABSession(BenchSession):
    """A bench session whose cases are A/B pairs; open it with ``ABSession.open``."""

    def measure_pair(
        self,
        spec_a: KernelSpec,
        spec_b: KernelSpec,
        suite: str,
        task: Task,
        seed: int,
        software: tuple[SoftwareInfo, SoftwareInfo] | None = None,
    ) -> ABMeasurement:
        """Time ``task`` with A's and B's implementation interleaved; every failure becomes
        an ``error`` record whose reason names the side. ``software`` is each side's (the
        suite file and revision it imported); the session's by default."""
        case = _case(suite, task)
        common = self._common(case)
        if task.dtype in self.device.unsupported_dtypes:
            reason = self.device.unsupported_dtypes[task.dtype]
            return self.unsupported(
                suite, task, f"unsupported on {self.device.info.kind}: {reason}"
            )
        start = time.perf_counter()
        stage = "A"
        try:
            pin = pinned_config(self.options.pins, task.kernel, task.params, task.dtype)
            source = self.options.pin_source
            first = _prepare_finite(spec_a, case, self.device, seed, pin, None, source)
            done_a = work(spec_a, case)
            stage = "B"
            b_pin, b_source = (pin, source) if pin is not None else _shared(first, spec_b)
            second = _prepare_finite(spec_b, case, self.device, seed, b_pin, first.inputs, b_source)
            done_b = work(spec_b, case)
            stage = "A/B timing"
            collected, states = self.time([first.kernel, second.kernel])
        except KernelUnsupported as exc:
            return ABMeasurement(status="unsupported", reason=f"{stage}: {exc}", **common)
        except Exception as exc:  # a kernel's failure is a record, not a crash of the run
            message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            return ABMeasurement(
                status="error",
                reason=f"{stage}: {message}"[:500],
                duration_s=time.perf_counter() - start,
                detail="".join(traceback.format_exc(limit=8))[-4000:],
                **common,
            )

        # Each side's CI is left as the order statistics give it, not widened by the
        # timer's step as bench's is.
        run = Run(collected.stop, self.resolved.rule, states, self.probe.available)

        def side(
            done: Work, prepared: Prepared, samples: tuple[Sample, ...], sw: SoftwareInfo
        ) -> Measurement:
            # No stock-library arm in an A/B session.
            fields = {**common, "baseline": None, "software": sw}
            source = prepared.config_source
            return self.record(fields, done, case, prepared.config, source, run, samples, start)

        sw_a, sw_b = software or (self.software, self.software)
        base = side(done_a, first, collected.arms[0], sw_a)
        head = side(done_b, second, collected.arms[1], sw_b)
        return ab_pair(common, base, head, start)

    def unsupported(self, suite: str, task: Task, reason: str) -> ABMeasurement:
        """The record of a case that cannot be compared (a side lacks it), saying why."""
        return ABMeasurement(
            status="unsupported", reason=reason, **self._common(_case(suite, task))
        )

    def _common(self, case: CaseId) -> dict[str, Any]:
        return {
            "case": case,
            "method": self.method,
            "device": self.device.info,
            "software": self.software,
        }


class ABArm:
    """One side of an A/B pair, in a process of its own: prepare a case, warm it up, take
    blocks of samples, build its record. The parent orders the calls; a call that fails
    raises (KernelUnsupported for a case this side cannot run)."""

    def __init__(self, session: BenchSession, side: str) -> None:
        self.session = session
        self.side = side
        self._case: CaseId | None = None
        self._spec: KernelSpec | None = None
        self._prepared: Prepared | None = None
        self._done: Work = (0, 0)
        self._start = 0.0
        self._take: Callable[[], Sample] | None = None
        self._before = State()
        self._samples: list[Sample] = []

    def prepare(
        self,
        spec: KernelSpec,
        suite: str,
        task: Task,
        seed: int,
        shared: LaunchConfig | None = None,
        shared_source: str = "",
    ) -> Prepared:
        """Make ``task``'s inputs from ``seed`` and fix its config: a pin file's, else (on
        side B) ``shared``, the config A launched and where it came from, when this side's
        tuning space has it, else its own autotuner's. Replaces any case before it."""
        session = self.session
        self._prepared = self._take = None
        self._samples = []
        self._start = time.perf_counter()
        self._case = case = _case(suite, task)
        self._spec = spec
        if task.dtype in session.device.unsupported_dtypes:
            reason = session.device.unsupported_dtypes[task.dtype]
            raise KernelUnsupported(f"unsupported on {session.device.info.kind}: {reason}")
        pin = pinned_config(session.options.pins, task.kernel, task.params, task.dtype)
        source = session.options.pin_source
        if pin is None and shared is not None:
            pin, source = _shared_pin(shared, shared_source, spec)
        self._prepared = _prepare_finite(spec, case, session.device, seed, pin, None, source)
        self._done = work(spec, case)
        return self._prepared

    def warm(self) -> float:
        """Warm the prepared launch up by time and read the device's state before sampling;
        returns the timer's step (ns)."""
        session, prepared = self.session, self._prepared
        if prepared is None:
            raise RuntimeError("warm before prepare")
        sampler = session.timer.bind(prepared.kernel, session.probe)
        self._take = sampled(sampler.take, session.probe)
        warm_up(self._take, session.resolved.warmup_s, session.clock)
        self._before = session.probe.state()
        return sampler.resolution_ns

    def sample(self, n: int) -> list[Sample]:
        """``n`` more samples, each throttled one followed by the rule's pause (as
        ``sampling.collect`` pauses)."""
        if self._take is None:
            raise RuntimeError("sample before warm")
        pause = self.session.resolved.rule.throttle_pause_s
        block = []
        for _ in range(n):
            sample = self._take()
            block.append(sample)
            if sample.throttled and pause > 0:
                self.session.sleep(pause)
        self._samples += block
        return block

    def finish(self, stop: str) -> Measurement:
        """This side's record of every sample it took, sampling having stopped for ``stop``
        (the parent's stopping rule over both sides). Its CI is left as the order
        statistics give it, as :meth:`ABSession.measure_pair` leaves it."""
        session, prepared, case = self.session, self._prepared, self._case
        if prepared is None or case is None:
            raise RuntimeError("finish before prepare")
        states = [self._before, session.probe.state()]
        run = Run(stop, session.resolved.rule, states, session.probe.available)
        fields = {
            "case": case,
            "method": session.method,
            "device": session.device.info,
            "software": session.software,
            "baseline": None,
        }
        source = prepared.config_source
        return session.record(
            fields, self._done, case, prepared.config, source, run, self._samples, self._start
        )


def _shared_pin(
    config: LaunchConfig, source: str, spec_b: KernelSpec
) -> tuple[LaunchConfig | None, str]:
    """B's pin from the config A launched: A's autotuner's choice, when B's tuning space has
    it; else none (B tunes itself)."""
    if source == "autotune" and config in spec_b.configs:
        return config, SHARED
    return None, "pin-file"


def _case(suite: str, task: Task) -> CaseId:
    return CaseId(suite, task.kernel, task.workload, dict(task.params), task.dtype)


def _shared(first: Prepared, spec_b: KernelSpec) -> tuple[LaunchConfig | None, str]:
    """B's pin: the config A's autotuner chose, when B's tuning space has it; else none."""
    return _shared_pin(first.config, first.config_source, spec_b)


def _prepare_finite(
    spec: KernelSpec,
    case: CaseId,
    device: Device,
    seed: int,
    pin: LaunchConfig | None,
    inputs: Mapping[str, Any] | None,
    pin_source: str,
) -> Prepared:
    """``case.prepare`` on ``spec``, then refuse outputs of its config-fixing launch that
    hold NaN or Inf: timing a kernel that computes garbage would read like a measurement."""
    prepared = prepare(spec, case, device, seed, pin, inputs, pin_source)
    for name, out in prepared.outputs.items():
        bad = int((~torch.isfinite(out)).sum()) if out.is_floating_point() else 0
        if bad:
            raise ValueError(f"{bad} of {out.numel()} elements of {name!r} are NaN/Inf")
    return prepared
