"""Time one case at two commits interleaved: the per-case driver of the runner's ``ab`` mode.

Runs in the runner child, with both commits' suites imported side by side
(``suite.load_suite_isolated``). For each case: A's fresh seeded inputs, shared by both
sides; one launch of each side that fixes its config, whose outputs must be finite (a NaN
or Inf output is that case's error, as the correctness check would call it); then A and B
sampled alternately through one timer (``timing.time_arms``). B launches the config A's
autotuner chose when B's tuning space has it (``config_source`` ``shared``): two autotuning
runs that pick different configs in a near tie would otherwise read as a code change. When
B's space lacks it, B tunes itself and the verdict says the configs differed.
Each side becomes a full :class:`Measurement`, built by ``bench``'s builder
(``timing/measurement.py``), so the flows can store each in its own commit's run.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
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
from kernelwatch.harness.timing.sampling import Sample

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


def _case(suite: str, task: Task) -> CaseId:
    return CaseId(suite, task.kernel, task.workload, dict(task.params), task.dtype)


def _shared(first: Prepared, spec_b: KernelSpec) -> tuple[LaunchConfig | None, str]:
    """B's pin: the config A's autotuner chose, when B's tuning space has it; else none."""
    if first.config_source == "autotune" and first.config in spec_b.configs:
        return first.config, SHARED
    return None, "pin-file"


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
