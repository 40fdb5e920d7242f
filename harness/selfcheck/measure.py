"""The self-check's measurements on the device (kernel child, ``selfcheck`` mode).

Each measurement answers one of the self-check's questions (``analysis/trust.py`` judges
them) and is handed to ``emit`` as soon as it is done, as plain JSON data, so a deadline or a
crash later keeps it:

- ``device``: the device, the software, how the GPU is set up to clock (NVML).
- ``granularity``: a microsecond kernel's event samples: distinct values, smallest step, and
  what the statistic made of them.
- ``ceilings``: the measured copy and bf16 GEMM roofs next to the datasheet's.
- ``sol``: a large memory-bound case's bandwidth against both.
- ``flush``: an L2-sized memory-bound case timed with L2 flushed by reading (ours) and by
  writing (nvbench's and do_bench's): both medians and their relative difference.
- ``agreement``: one case per kernel under every tool: ours (events, cold L2), ours in a CUDA
  graph (warm), ``triton.testing.do_bench`` (median; it zeroes a 256 MiB buffer before every
  launch, so L2 is cold and the host is usually ahead) and ``torch.utils.benchmark`` (host
  clock around back-to-back launches, warm L2). A tool that fails leaves the others' numbers.
- ``trace``: a decode step of the selected kernels (one launch each, of the middle case of
  its ``decode`` workload, or of the self-check's workload for a kernel with none: norms,
  activations, rope run per token either way) run ``TRACE_STEPS`` times under
  ``torch.profiler`` after a warm-up: the Chrome trace as the profiler wrote it (gzipped,
  base64) and the functions each kernel launched, named as they launched. The parent reads
  it as a serving trace is read (issue 44: the shares a serving regression is explained by
  come from such traces) and checks the shares.
- ``clocks``: every sample this process took: how many were throttled and why, the SM clock.
  Emitted again after every other measurement, so a deadline kill keeps the clocks so far.

CI coverage is not measured here: one process repeating a case cannot see process-to-process
noise, so its repeats come from the A/A stage's independent children
(``harness/selfcheck/stages.py``). Agreement's rows are emitted one by one as they finish.

The tools are passed in (:class:`Tools`): the device's real ones here, a simulated GPU's in
the tests, which run this module end to end on the CPU.
"""

from __future__ import annotations

import base64
import gzip
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from kernelwatch.harness.device import Device
from kernelwatch.harness.launcher import Observed, observing
from kernelwatch.harness.records import CaseId, SoftwareInfo, Summary
from kernelwatch.harness.spec import KernelSpec, KernelUnsupported, Params, Suite
from kernelwatch.harness.suite import select_tasks
from kernelwatch.harness.timing.case import BenchSession, prepare
from kernelwatch.harness.timing.ceilings import CeilingLaunches, measure_ceilings
from kernelwatch.harness.timing.request import SelfcheckOptions
from kernelwatch.harness.timing.roofline import ELEMENT_BYTES, datasheet_peaks
from kernelwatch.harness.timing.sampling import (
    Collected,
    Sample,
    quantum,
    summarize_collected,
)
from kernelwatch.harness.timing.telemetry import (
    CLOCK_EVENT_REASONS,
    LOCKED_CLOCKS_REASON,
    Probe,
)
from kernelwatch.harness.timing.timers import (
    COLD,
    CPU_TIMER,
    EVENTS_TIMER,
    FLUSHES,
    GRAPH_TIMER,
    READ_FLUSH,
    WRITE_FLUSH,
    CudaTimer,
    Timer,
    make_timer,
    time_flushes,
)

#: Samples taken for the granularity question: enough to see every value events take.
GRANULARITY_SAMPLES = 200
#: Decode steps run under the profiler: a kernel's launches in the trace are this many times
#: its launches in one step.
TRACE_STEPS = 3
#: The workload whose middle case a kernel runs in the traced step, where it has one.
TRACE_WORKLOAD = "decode"
#: The name of each traced step's ``record_function`` range.
STEP_RANGE = "kernelwatch_step"

Emit = Callable[[str, Mapping[str, Any]], None]


@dataclass(frozen=True)
class Tools:
    """What the measurements run on. ``timer(name)`` builds a timer of that method (None
    where the device cannot do it); ``do_bench``/``torch_benchmark`` time a launch and return
    its median in ns (None where they cannot run); ``profile(step, n)`` runs ``step`` n times
    under the profiler and returns its Chrome trace's bytes (None: no profiler);
    ``observe()`` names the GPU functions launched inside it;
    ``ceilings`` are the roofs' workloads (None: the device's own); ``clock``/``sleep`` the
    host's."""

    timer: Callable[[str], Timer | None]
    probe: Probe
    do_bench: Callable[[Callable[[], object]], float] | None
    torch_benchmark: Callable[[Callable[[], object]], float] | None
    profile: Callable[[Callable[[], object], int], bytes] | None = None
    observe: Callable[[], AbstractContextManager[Observed]] = observing
    ceilings: CeilingLaunches | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


def device_tools(device: Device, probe: Probe) -> Tools:
    """The real tools on ``device``: CUDA events and graphs, do_bench and
    torch.utils.benchmark on a GPU; the perf counter and torch.utils.benchmark on the CPU."""
    info = device.info
    cuda = info.kind == "cuda"

    def timer(name: str) -> Timer | None:
        if not cuda:
            return make_timer("cpu", CPU_TIMER, None, None, None) if name == EVENTS_TIMER else None
        return make_timer("cuda", name, None, info.l2_bytes, probe.max_sm_clock_mhz)

    return Tools(timer, probe, _do_bench if cuda else None, _torch_benchmark, _profiler(cuda))


def _do_bench(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median")) * 1e6  # it reports ms


def _torch_benchmark(fn: Callable[[], object]) -> float:
    from torch.utils.benchmark import Timer as TorchTimer

    # Its documented default use; it synchronizes CUDA around each block of runs.
    measured = TorchTimer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
    return float(measured.median) * 1e9


def step_case(spec: KernelSpec, workload: str) -> tuple[str, Params] | None:
    """``spec``'s case in the traced step: the middle case of ``TRACE_WORKLOAD`` where it has
    one, else of the self-check's ``workload``; None when it has neither."""
    chosen = next((w for w in (TRACE_WORKLOAD, workload) if w in spec.workloads), None)
    if chosen is None:
        return None
    cases = spec.workloads[chosen]
    return chosen, cases[len(cases) // 2]


def _profiler(cuda: bool) -> Callable[[Callable[[], object], int], bytes]:
    """torch.profiler around ``steps`` calls of a step, each in a ``STEP_RANGE`` range, with
    CUDA activities on a GPU (on the CPU the trace has no kernel events, which the reader
    says)."""

    def profile(step: Callable[[], object], steps: int) -> bytes:
        import torch
        from torch.profiler import ProfilerActivity, record_function
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
        with torch_profile(activities=activities) as prof:
            for _ in range(steps):
                with record_function(STEP_RANGE):
                    step()
            if cuda:
                torch.cuda.synchronize()
        # In the sandbox's own temporary folder (TMPDIR), removed before the child answers.
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "trace.json"
            prof.export_chrome_trace(str(path))
            return path.read_bytes()

    return profile


class _Measurer:
    """One self-check's measurements on one device, keeping every sample for ``clocks``."""

    def __init__(
        self,
        suite: Suite,
        device: Device,
        software: SoftwareInfo,
        options: SelfcheckOptions,
        tools: Tools,
    ) -> None:
        self.suite, self.device, self.options, self.tools = suite, device, options, tools
        self.samples: list[Sample] = []
        bench = replace(options.bench, baseline=False)

        def session(timer: Timer | None) -> BenchSession | None:
            if timer is None:
                return None
            return BenchSession(
                device, bench, software, timer, tools.probe, tools.clock, tools.sleep
            )

        events = session(tools.timer(EVENTS_TIMER))
        assert events is not None, "every device has an events or perf-counter timer"
        self.session, self.graph = events, session(tools.timer(GRAPH_TIMER))
        selected = [s for s in suite.kernels if not options.kernels or s.name in options.kernels]
        # A distributed case is compared with nothing single-process.
        single = [s for s in selected if isinstance(s, KernelSpec)]
        self.specs = [s for s in single if options.workload in s.workloads]
        #: The traced step's kernels, each with the workload and case it runs.
        self.step_cases = [
            (s, *case)
            for s in single
            if options.dtype in s.dtypes and (case := step_case(s, options.workload)) is not None
        ]

    def collect(self, fn: Callable[[], object], graph: bool = False) -> Collected:
        """Samples of ``fn`` under the run's stopping rule, with events (or the perf
        counter) or in a CUDA graph; kept for ``clocks``."""
        session = self.graph if graph else self.session
        assert session is not None
        collected, _ = session.time([fn])
        self.samples.extend(collected.arms[0])
        return collected

    def ours(self, fn: Callable[[], object], graph: bool = False) -> Summary | None:
        """Our median and CI of ``fn``."""
        return summarize_collected(self.collect(fn, graph))

    def launch(
        self, spec: KernelSpec, params: Params, workload: str | None = None
    ) -> Callable[[], object]:
        case = self.case(spec, params, workload)
        return prepare(spec, case, self.device, 0, None).kernel

    def case(self, spec: KernelSpec, params: Params, workload: str | None = None) -> CaseId:
        return CaseId(self.suite.name, spec.name, workload or self.options.workload,
                      dict(params), self.options.dtype)  # fmt: skip

    def middle(self, spec: KernelSpec) -> Params:
        cases = spec.workloads[self.options.workload]
        return cases[len(cases) // 2]

    # -- the questions ------------------------------------------------------------------

    def device_data(self) -> dict[str, Any]:
        return {
            "device": asdict(self.device.info),
            "software": asdict(self.session.software),
            "policy": asdict(self.tools.probe.policy()),
            "method": self.session.method.label(),
            "rule": asdict(self.session.resolved.rule),
        }

    def granularity(self) -> dict[str, Any]:
        spec = self.specs[0]
        params = spec.workloads[self.options.workload][0]
        fn = self.launch(spec, params)
        timer = self.session.timer
        sampler = timer.bind(fn)
        values = [sampler.take().ns for _ in range(GRANULARITY_SAMPLES)]
        summary = self.ours(fn)
        distinct = np.unique(values)
        steps = np.diff(distinct)
        return {
            "kernel": spec.name,
            "case": self.case(spec, params).label(),
            "samples": len(values),
            "distinct": int(distinct.size),
            "smallest_step_ns": float(steps.min()) if steps.size else None,
            "resolution_ns": sampler.resolution_ns,
            "quantum_ns": quantum(values, sampler.resolution_ns),
            "summary": _summary(summary),
        }

    def ceilings(self) -> dict[str, Any]:
        measured = measure_ceilings(self.device, self.collect, self.tools.ceilings)
        self.session.ceilings = measured
        sheet = datasheet_peaks(self.device.info.name)
        return {
            **asdict(measured),
            "datasheet_gbps": sheet.memory_gbps if sheet else None,
            "datasheet_bf16_tflops": sheet.tflops.get("bf16") if sheet else None,
        }

    def sol(self) -> dict[str, Any]:
        options = self.options
        spec = next((s for s in self.specs if s.name == options.sol_kernel), None)
        if spec is None:
            return {"skipped": f"{options.sol_kernel} is not among the selected kernels"}
        summary = self.ours(self.launch(spec, options.sol_case))
        if summary is None:
            return {"error": "every sample was throttled"}
        moved = spec.min_bytes(options.sol_case, ELEMENT_BYTES[options.dtype])
        ceilings = self.session.ceilings
        sheet = datasheet_peaks(self.device.info.name)
        gbps = moved / summary.median_ns
        return {
            "kernel": spec.name,
            "case": self.case(spec, options.sol_case).label(),
            "median_ns": summary.median_ns,
            "bytes": moved,
            "gbps": gbps,
            "copy_gbps": ceilings.copy_gbps if ceilings else None,
            "datasheet_gbps": sheet.memory_gbps if sheet else None,
        }

    def flush(self) -> dict[str, Any]:
        """One memory-bound case timed cold with L2 flushed by reading and by writing,
        interleaved: what the dirty lines a write flush leaves cost the kernel. The case is
        the %SOL kernel's (else the first kernel's) smallest that moves at least the L2's
        size, whose misses then evict every dirty line (else its largest; its smallest
        where the L2's size is unknown)."""
        timer = self.session.timer
        if not isinstance(timer, CudaTimer) or timer.method.l2 != COLD:
            return {"skipped": "flushing L2 needs the CUDA events timer with cold L2"}
        options, l2 = self.options, self.device.info.l2_bytes or 0
        spec = next((s for s in self.specs if s.name == options.sol_kernel), self.specs[0])
        element = ELEMENT_BYTES[options.dtype]
        by_size = sorted(spec.workloads[options.workload], key=lambda p: spec.min_bytes(p, element))
        params = next((p for p in by_size if spec.min_bytes(p, element) >= l2), by_size[-1])
        fn = self.launch(spec, params)
        tools, resolved = self.tools, self.session.resolved
        tools.sleep(resolved.cool_down_s)
        collected, _ = time_flushes(
            fn, timer, tools.probe, resolved.rule, resolved.warmup_s, tools.clock, tools.sleep
        )
        medians: dict[str, float | None] = {}
        for arm, flush in enumerate(FLUSHES):
            self.samples.extend(collected.arms[arm])
            medians[flush] = _median(summarize_collected(collected, arm))
        read, written = medians[READ_FLUSH], medians[WRITE_FLUSH]
        if read is None or written is None:
            return {"error": "every sample of one flush was throttled; let the GPU cool down"}
        return {
            "kernel": spec.name,
            "case": self.case(spec, params).label(),
            "read_flush_ns": read,
            "write_flush_ns": written,
            "difference": (written - read) / read,
        }

    def agreement(self, emit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        rows: list[dict[str, Any]] = []
        for spec in self.specs:
            rows.append(self._agreement_row(spec))
            emit({"rows": rows, "partial": True})
        return {"rows": rows}

    def _agreement_row(self, spec: KernelSpec) -> dict[str, Any]:
        """Every tool on one case; a tool that fails is an error of the row, and the numbers
        the others measured stay."""
        params = self.middle(spec)
        row: dict[str, Any] = {"kernel": spec.name, "case": self.case(spec, params).label()}
        errors: list[str] = []
        try:
            fn = self.launch(spec, params)
        except Exception as exc:  # the kernel's failure is the row's
            return {**row, "errors": [f"prepare: {_line(exc)}"]}
        tools = self.tools
        steps: list[tuple[str, Callable[[], Any] | None]] = [
            ("ours", lambda: _summary(self.ours(fn))),
            ("graph_ns", (lambda: _median(self.ours(fn, graph=True))) if self.graph else None),
            ("do_bench_ns", (lambda: tools.do_bench(fn)) if tools.do_bench else None),
            ("torch_benchmark_ns", (lambda: tools.torch_benchmark(fn))
             if tools.torch_benchmark else None),
        ]  # fmt: skip
        for name, step in steps:
            if step is None:  # the tool cannot run here
                row[name] = None
                continue
            try:
                row[name] = step()
            except Exception as exc:  # one tool's failure leaves the others' numbers
                row[name] = None
                errors.append(f"{name}: {_line(exc)}")
        return {**row, "errors": errors}

    def trace(self) -> dict[str, Any]:
        """The decode step under the profiler (see the module docstring). Each kernel runs
        once before it is observed, so compiling and autotuning are neither named nor
        traced; a kernel this device cannot run is left out and said, one that fails to
        launch is left out and is an error."""
        if self.tools.profile is None:
            raise RuntimeError("no profiler on this device")
        kernels: list[dict[str, Any]] = []
        step: list[Callable[[], object]] = []
        errors: list[str] = []
        unsupported: list[str] = []
        for spec, workload, params in self.step_cases:
            try:
                fn = self.launch(spec, params, workload)
                fn()
                with self.tools.observe() as seen:
                    fn()
            except KernelUnsupported as exc:
                unsupported.append(f"{spec.name}: {_line(exc)}")
                continue
            except Exception as exc:  # the kernel's failure leaves the step to the others
                errors.append(f"{spec.name}: {_line(exc)}")
                continue
            kernels.append(
                {
                    "kernel": spec.name,
                    "workload": workload,
                    "case": dict(params),
                    "functions": seen.functions,
                    "baseline": spec.baseline.name,
                }
            )
            step.append(fn)
        if not step:
            raise RuntimeError("no kernel could be launched: " + "; ".join(errors))

        def run_step() -> None:
            for fn in step:
                fn()

        raw = self.tools.profile(run_step, TRACE_STEPS)
        return {
            "steps": TRACE_STEPS,
            "kernels": kernels,
            "errors": errors,
            "unsupported": unsupported,
            "trace_gz": base64.b64encode(gzip.compress(raw)).decode(),
        }

    def clocks(self) -> dict[str, Any]:
        samples = self.samples
        reasons: Counter[str] = Counter()
        for sample in samples:
            for bit, name in CLOCK_EVENT_REASONS.items():
                if sample.throttle_reasons is not None and sample.throttle_reasons & bit:
                    reasons[name] += 1
        clocks = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None]
        policy = self.tools.probe.policy()
        locked_bit = CLOCK_EVENT_REASONS[LOCKED_CLOCKS_REASON]
        return {
            "samples": len(samples),
            "throttled": sum(s.throttled for s in samples),
            "throttled_sm_mhz": [s.sm_clock_mhz for s in samples if s.throttled][:20],
            "reasons": dict(reasons),
            "with_reasons": sum(1 for s in samples if s.throttle_reasons),
            "median_sm_mhz": float(np.median(clocks)) if clocks else None,
            "max_sm_mhz": policy.max_sm_clock_mhz,
            "policy": asdict(policy),
            # unknown unless some sample had its reasons read
            "locked_reason_seen": (
                reasons[locked_bit] > 0
                if any(s.throttle_reasons is not None for s in samples)
                else None
            ),
        }


def run_measurements(
    suite: Suite,
    device: Device,
    software: SoftwareInfo,
    options: SelfcheckOptions,
    tools: Tools,
    emit: Emit,
    progress: Callable[[str], None] = lambda message: None,
) -> None:
    """Measure every question in turn and ``emit(name, data)`` each as it finishes; one that
    fails is emitted as ``{"error": ...}`` and the next goes on. Raises the suite's
    SelectionError for kernels or a workload it lacks."""
    select_tasks(suite, options.kernels, options.workload, [options.dtype])  # validates
    measurer = _Measurer(suite, device, software, options, tools)
    emit("device", measurer.device_data())
    steps: Sequence[tuple[str, Callable[[], dict[str, Any]]]] = (
        ("granularity", measurer.granularity),
        ("ceilings", measurer.ceilings),
        ("sol", measurer.sol),
        ("flush", measurer.flush),
        ("agreement", lambda: measurer.agreement(lambda rows: emit("agreement", rows))),
        ("trace", measurer.trace),
    )
    for name, step in steps:
        if options.steps and name not in options.steps:
            continue
        progress(name)
        try:
            data = step()
        except Exception as exc:  # one question's failure is its answer, not the run's
            data = {"error": _line(exc)}
        emit(name, data)
        if not options.steps or "clocks" in options.steps:
            emit("clocks", measurer.clocks())


def _summary(summary: Summary | None) -> dict[str, Any] | None:
    return asdict(summary) if summary is not None else None


def _median(summary: Summary | None) -> float | None:
    return summary.median_ns if summary is not None else None


def _line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
