"""Time one kernel case, with its stock-library baseline interleaved: the per-case driver.

Runs in the kernel child (kernel code is imported only there). For each case: fresh seeded
inputs, one launch that fixes the config (the autotuner's choice, a pin, or the spec's
pinned config), a cool-down (after that launch: autotuning runs the GPU at full load), then
the kernel and the baseline sampled alternately through the same timer until the stopping
rule is met. The record (built by ``timing/measurement.py``) keeps every raw sample with
its clocks and throttle flag, the statistic over unthrottled samples, telemetry,
speed-of-light and the speedup over the baseline; a failure is a record, never an
exception.
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelwatch.harness import launcher
from kernelwatch.harness.correctness import case_seed
from kernelwatch.harness.device import Device
from kernelwatch.harness.records import (
    CaseId,
    LaunchConfig,
    Measurement,
    Method,
    SoftwareInfo,
    SpeedOfLight,
)
from kernelwatch.harness.spec import DTYPES, KernelSpec, KernelUnsupported, Params
from kernelwatch.harness.timing.ceilings import measure_ceilings
from kernelwatch.harness.timing.measurement import Run, measurement
from kernelwatch.harness.timing.pinning import pinned_config
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.roofline import (
    ELEMENT_BYTES,
    Ceilings,
    Peaks,
    datasheet_peaks,
    speed_of_light,
    with_ceilings,
)
from kernelwatch.harness.timing.sampling import Collected, Sample
from kernelwatch.harness.timing.telemetry import Probe, State, open_probe
from kernelwatch.harness.timing.timers import Timer, make_timer, time_arms

#: One launch's FLOPs and fewest bytes moved: the roofline's inputs.
Work = tuple[int, int]


def work(spec: KernelSpec, case: CaseId) -> Work:
    """The work of one launch of ``case``. Asked before any sample is taken, so a spec whose
    ``flops`` or ``min_bytes`` is still a ``todo`` is unsupported before time is spent."""
    return spec.flops(case.params), spec.min_bytes(case.params, ELEMENT_BYTES[case.dtype])


@dataclass(frozen=True)
class Prepared:
    """A case ready to time: inputs made, config fixed, two zero-argument launches, and the
    outputs of the launch that fixed the config."""

    inputs: Mapping[str, Any]
    config: LaunchConfig
    config_source: str
    kernel: Callable[[], object]
    #: None where the stock library cannot run the case on this device (``baseline_missing``
    #: says why, in one line): the kernel is timed alone.
    baseline: Callable[[], object] | None
    outputs: Mapping[str, torch.Tensor]
    baseline_missing: str = ""


def prepare(
    spec: KernelSpec,
    case: CaseId,
    device: Device,
    seed: int,
    pin: LaunchConfig | None,
    inputs: Mapping[str, Any] | None = None,
    pin_source: str = "pin-file",
) -> Prepared:
    """Make the case's inputs (or reuse ``inputs``), prepare the outputs (``launcher.bind``:
    in-place buffers are copies, so ``inputs`` stay as made), launch once to fix the config,
    and return launches that repeat exactly that config (no autotuning inside a timed
    region). ``pin_source`` says where ``pin`` came from (``Measurement.config_source``)."""
    params = case.params
    if inputs is None:
        generator = torch.Generator(device=device.torch_device)
        generator.manual_seed(case_seed(seed, case))
        inputs = spec.make_inputs(
            params, DTYPES[case.dtype], torch.device(device.torch_device), generator
        )
    bound = launcher.bind(spec, inputs, params)
    if pin is not None:
        requested, source = pin, pin_source
    elif not device.can_autotune and spec.pinned_config is not None:
        requested, source = spec.pinned_config, "pinned"
    else:
        requested, source = None, "autotune" if spec.configs else "heuristic"
    outputs, config = launcher.launch(spec, bound, params, requested)
    try:
        spec.baseline.fn(inputs, params)
    except KernelUnsupported as exc:  # the library's, not the kernel's: time the kernel alone
        baseline, missing = None, f"no baseline here: {exc}"
    else:
        baseline, missing = functools.partial(spec.baseline.fn, inputs, params), ""
    device.synchronize()  # inputs were made on the default stream; timers use their own
    return Prepared(
        inputs,
        config,
        source,
        launcher.repeat(spec, bound, params, config),
        baseline,
        outputs,
        missing,
    )


class BenchSession:
    """Everything a run shares across cases: the device, timer, NVML probe and roofline.
    ``clock`` and ``sleep`` are the host's (a simulated GPU's in the tests)."""

    def __init__(
        self,
        device: Device,
        options: BenchOptions,
        software: SoftwareInfo,
        timer: Timer,
        probe: Probe,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.device = device
        self.options = options
        self.resolved = options.resolved(device.info.kind)
        self.software = software
        self.timer = timer
        self.probe = probe
        self.clock = clock
        self.sleep = sleep
        self.ceilings: Ceilings | None = options.ceilings

    @classmethod
    def open(
        cls, device: Device, options: BenchOptions, software: SoftwareInfo, siblings: int = 0
    ) -> BenchSession:
        """Build the timer, the probe and the roofline for ``device``, measuring ceilings
        first when asked to (and not handed them by an earlier child of the same run); a
        ceiling that cannot be measured is left out, never fatal. ``siblings``: processes
        of this run that hold the GPU too (an A/B pair's other side). Raises ValueError for
        a timer or L2 state the device cannot do."""
        info = device.info
        probe = open_probe(info.uuid if info.kind == "cuda" else None, siblings=siblings)
        timer = make_timer(
            info.kind, options.timer, options.l2, info.l2_bytes, probe.max_sm_clock_mhz
        )
        session = cls(device, options, software, timer, probe)
        if session.ceilings is None and options.measure_ceilings:
            session.ceilings = measure_ceilings(device, lambda fn: session.time([fn])[0])
        return session

    def time(self, launches: list[Callable[[], object]]) -> tuple[Collected, list[State]]:
        """Cool down, then sample ``launches`` interleaved under the run's stopping rule."""
        self.sleep(self.resolved.cool_down_s)
        return time_arms(
            launches,
            self.timer,
            self.probe,
            self.resolved.rule,
            self.resolved.warmup_s,
            self.clock,
            self.sleep,
        )

    @property
    def method(self) -> Method:
        return self.timer.method

    @property
    def peaks(self) -> Peaks | None:
        """The roofline: the datasheet's, with measured ceilings replacing what they measure."""
        name = self.device.info.name
        return with_ceilings(datasheet_peaks(name), self.ceilings, name)

    def measure(
        self, spec: KernelSpec, suite: str, workload: str, params: Params, dtype: str, seed: int
    ) -> Measurement:
        """Time one case; every failure becomes an ``error`` record."""
        case = CaseId(suite, spec.name, workload, dict(params), dtype)
        base: dict[str, Any] = {
            "case": case,
            "method": self.method,
            "device": self.device.info,
            "software": self.software,
            "baseline": spec.baseline.name if self.options.baseline else None,
        }
        if dtype in self.device.unsupported_dtypes:
            reason = (
                f"unsupported on {self.device.info.kind}: {self.device.unsupported_dtypes[dtype]}"
            )
            return Measurement(status="unsupported", reason=reason, **base)
        start = time.perf_counter()
        config = None
        try:
            pin = pinned_config(self.options.pins, spec.name, params, dtype)
            prepared = prepare(spec, case, self.device, seed, pin, None, self.options.pin_source)
            config = prepared.config
            done = work(spec, case)
            launches = [prepared.kernel]
            if self.options.baseline and prepared.baseline is not None:
                launches.append(prepared.baseline)
            elif prepared.baseline is None:
                base.update(baseline=None, detail=prepared.baseline_missing)
            collected, states = self.time(launches)
        except KernelUnsupported as exc:
            return Measurement(status="unsupported", reason=str(exc), config=config, **base)
        except Exception as exc:  # a kernel's failure is a record, not a crash of the run
            message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            return Measurement(
                status="error",
                reason=message[:500],
                config=config,
                duration_s=time.perf_counter() - start,
                detail="".join(traceback.format_exc(limit=8))[-4000:],
                **base,
            )
        rule, available = self.resolved.rule, self.probe.available
        run = Run(collected.stop, rule, states, available, collected.resolution_ns)
        kernel = collected.arms[0]
        baseline = collected.arms[1] if len(collected.arms) > 1 else ()
        source = prepared.config_source
        return self.record(base, done, case, prepared.config, source, run, kernel, start, baseline)

    def record(
        self,
        common: Mapping[str, Any],
        done: Work,
        case: CaseId,
        config: LaunchConfig,
        config_source: str,
        run: Run,
        samples: Sequence[Sample],
        start: float,
        baseline: Sequence[Sample] = (),
    ) -> Measurement:
        """The measurement of ``case`` from its samples (and the stock baseline's), with its
        speed-of-light on this session's roofline for the ``done`` work of one launch."""

        def sol(median_ns: float) -> SpeedOfLight:
            return speed_of_light(*done, median_ns, case.dtype, self.peaks)

        return measurement(common, run, samples, config, config_source, start, baseline, sol=sol)
