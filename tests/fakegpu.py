"""A simulated GPU behind a fake ``torch`` and a fake NVML, for the GPU code paths on the CPU.

The simulation keeps two clocks: the host's (advanced by what the host does: a kernel
launch's Python and driver cost, a sleep) and one GPU stream's (work queued on it runs in
order, each item starting once the host has submitted it and the previous item is done).
CUDA events take the stream's time when the GPU reaches them, rounded to the events'
resolution; ``torch.cuda._sleep`` spins for a number of SM cycles, so its length depends on
the SM clock, which idles low until the GPU has been busy a while (as real GPUs ramp up).
CUDA graphs record launches at capture and replay them back to back for one host launch.
L2 is modelled as far as flushing it matters: zeroing a buffer leaves L2 full of dirty
lines, and the next kernel that touches memory (``footprint_bytes``) writes back as many of
them as it evicts, at the memset rate, on top of its own time; reading a buffer (``sum``)
leaves clean lines, which cost nothing to evict.

``FakeGpu.torch`` stands in for the ``torch`` module where the timer imports it; ``nvml()``
returns a fake ``pynvml`` reading this GPU's clocks; ``monotonic``/``perf_counter_ns``/
``sleep`` are the host clock, for the sampling loop and the cool-down.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


@dataclass
class FakeGpu:
    """One GPU and its host. Times in ns, clocks in MHz."""

    event_step_ns: float = 500.0
    launch_host_ns: float = 20_000.0  # a Triton launch from Python
    record_host_ns: float = 2_000.0  # recording an event, enqueueing a spin or a memset
    submit_ns: float = 1_000.0  # from the host's submit to the GPU seeing the work
    idle_mhz: float = 345.0
    boost_mhz: float = 1980.0
    max_mhz: float = 1980.0
    warm_after_ns: float = 50e6  # busy time before the clock leaves idle
    memset_gbps: float = 3000.0  # zeroing, reading and writing back dirty lines alike
    l2_bytes: int = 50 << 20
    dirty_bytes: float = 0.0  # dirty lines in L2
    host_ns: float = 0.0
    gpu_free_ns: float = 0.0
    busy_ns: float = 0.0
    clock_override: Callable[[FakeGpu], float] | None = None
    spins: list[int] = field(default_factory=list)
    capturing: list[float] | None = None
    host_hiccups: dict[int, float] = field(default_factory=dict)  # launch index -> extra ns
    launches: int = 0
    jitter: float = 0.0  # relative standard deviation of a kernel's duration
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    # Launched kernels as a profiler and an observer see them: (name, start ns, duration ns).
    traced: list[tuple[str, float, float]] | None = None
    observed: list[str] | None = None

    # -- the GPU --------------------------------------------------------------------------

    @property
    def clock_mhz(self) -> float:
        if self.clock_override is not None:
            return self.clock_override(self)
        return self.boost_mhz if self.busy_ns >= self.warm_after_ns else self.idle_mhz

    @property
    def busy(self) -> bool:
        """Whether the GPU still has queued work at the host's present time."""
        return self.host_ns < self.gpu_free_ns

    def run(self, duration_ns: float, host_cost_ns: float) -> float:
        """Queue ``duration_ns`` of GPU work submitted now; the host pays ``host_cost_ns``
        first. Returns when the work ends, in GPU time."""
        self.host_ns += host_cost_ns
        start = max(self.host_ns + self.submit_ns, self.gpu_free_ns)
        self.gpu_free_ns = start + duration_ns
        self.busy_ns += duration_ns
        return self.gpu_free_ns

    def launch(self, kernel_ns: float, footprint_bytes: float = 0.0, name: str = "") -> None:
        """A kernel launch from the host (a captured one during graph capture); a kernel that
        touches ``footprint_bytes`` of memory evicts that much of L2, writing back the dirty
        lines among them. ``name``: its GPU function's, for the observer and the profiler."""
        if self.observed is not None:
            self.observed.append(name)
        if self.capturing is not None:
            self.capturing.append(kernel_ns)
            return
        extra = self.host_hiccups.get(self.launches, 0.0)
        self.launches += 1
        if self.jitter:
            kernel_ns *= 1.0 + self.rng.gauss(0.0, self.jitter)
        written_back = min(self.dirty_bytes, footprint_bytes)
        self.dirty_bytes -= written_back
        duration = kernel_ns + written_back / self.memset_gbps
        end = self.run(duration, self.launch_host_ns + extra)
        if self.traced is not None:
            self.traced.append((name, end - duration, duration))

    @contextlib.contextmanager
    def observe(self) -> Iterator[SimpleNamespace]:
        """What ``launcher.observing`` is on a GPU: the functions launched inside, in order."""
        seen = SimpleNamespace(functions=[])
        self.observed = seen.functions
        try:
            yield seen
        finally:
            self.observed = None

    def profile(self, step: Callable[[], object], steps: int, kernels: bool = True) -> bytes:
        """torch.profiler's Chrome trace of ``steps`` calls of ``step`` as Kineto writes it: a
        CPU range per step, each kernel a complete event of category ``kernel`` (``dur`` in
        us); with ``kernels`` False, a CPU-only profile."""
        self.traced = []
        events: list[dict[str, Any]] = []
        try:
            for _ in range(steps):
                began = self.host_ns
                step()
                events.append({"ph": "X", "cat": "user_annotation", "name": "kernelwatch_step",
                               "ts": began / 1e3, "dur": (self.host_ns - began) / 1e3})  # fmt: skip
        finally:
            traced, self.traced = self.traced, None
        if kernels:
            events += [
                {"ph": "X", "cat": "kernel", "name": name, "ts": start / 1e3, "dur": ns / 1e3,
                 "args": {"grid": [1, 1, 1], "block": [128, 1, 1]}}
                for name, start, ns in traced
            ]  # fmt: skip
        properties = [{"id": 0, "name": "NVIDIA H200"}] if kernels else []
        return json.dumps({"schemaVersion": 1, "deviceProperties": properties,
                           "traceEvents": events}).encode()  # fmt: skip

    def kernel(self, kernel_ns: float, footprint_bytes: float = 0.0) -> Callable[[], None]:
        return lambda: self.launch(kernel_ns, footprint_bytes)

    def warm(self, busy_ns: float = 0.0) -> None:
        """Keep the GPU busy until its clock is up (the harness's warm-up)."""
        self.run(max(busy_ns, self.warm_after_ns - self.busy_ns), 0.0)
        self.host_ns = max(self.host_ns, self.gpu_free_ns)

    # -- the host's clocks ----------------------------------------------------------------

    def perf_counter_ns(self) -> int:
        return int(self.host_ns)

    def monotonic(self) -> float:
        return self.host_ns / 1e9

    def sleep(self, seconds: float) -> None:
        self.host_ns += seconds * 1e9

    # -- torch ----------------------------------------------------------------------------

    @property
    def torch(self) -> SimpleNamespace:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.at: float | None = None

            def record(self, stream: Any = None) -> None:
                gpu.host_ns += gpu.record_host_ns
                self.at = gpu.gpu_free_ns = max(gpu.host_ns + gpu.submit_ns, gpu.gpu_free_ns)

            def synchronize(self) -> None:
                assert self.at is not None
                gpu.host_ns = max(gpu.host_ns, self.at)

            def elapsed_time(self, end: Event) -> float:
                assert self.at is not None and end.at is not None
                step = gpu.event_step_ns
                ticks = math.floor(end.at / step) - math.floor(self.at / step)
                return ticks * step / 1e6  # ms, as torch reports it

        class Buffer:
            def __init__(self, nbytes: int) -> None:
                self.nbytes = nbytes

            def zero_(self) -> Buffer:
                gpu.run(self.nbytes / gpu.memset_gbps, gpu.record_host_ns)
                gpu.dirty_bytes = min(self.nbytes, gpu.l2_bytes)
                return self

            def read(self) -> None:
                gpu.run(self.nbytes / gpu.memset_gbps, gpu.record_host_ns)
                gpu.dirty_bytes = 0.0

        def buffer(
            shape: int | tuple[int, ...], dtype: str = "uint8", device: Any = None
        ) -> Buffer:
            dims = (shape,) if isinstance(shape, int) else shape
            return Buffer(math.prod(dims) * ELEMENT_BYTES[dtype])

        def reduce_sum(tensor: Buffer, dim: int | None = None, out: Any = None) -> Buffer:
            tensor.read()
            return out if out is not None else buffer(())

        class Graph:
            def __init__(self) -> None:
                self.kernels: list[float] = []

            def replay(self) -> None:
                gpu.run(sum(self.kernels), gpu.launch_host_ns)

        @contextlib.contextmanager
        def capture(graph: Graph, stream: Any = None) -> Iterator[None]:
            gpu.capturing = graph.kernels
            try:
                yield
            finally:
                gpu.capturing = None

        def spin(cycles: int) -> None:
            gpu.spins.append(cycles)
            gpu.run(cycles / gpu.clock_mhz * 1e3, gpu.record_host_ns)

        def synchronize() -> None:
            gpu.host_ns = max(gpu.host_ns, gpu.gpu_free_ns)

        cuda = SimpleNamespace(
            Stream=lambda: object(),
            Event=Event,
            stream=lambda s: contextlib.nullcontext(),
            _sleep=spin,
            CUDAGraph=Graph,
            graph=capture,
            synchronize=synchronize,
        )
        return SimpleNamespace(
            cuda=cuda,
            uint8="uint8",
            float32="float32",
            empty=buffer,
            zeros=buffer,
            sum=reduce_sum,
        )

    # -- the other tools ------------------------------------------------------------------

    def do_bench(self, fn: Callable[[], object], reps: int = 50) -> float:
        """``triton.testing.do_bench``'s loop (median): zero a 256 MiB buffer, record an
        event, launch, record an event; the zeroing keeps the host ahead."""
        torch = self.torch
        cache = torch.empty(256 << 20)
        times = []
        for _ in range(reps):
            cache.zero_()
            start, end = torch.cuda.Event(True), torch.cuda.Event(True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1e6)
        return statistics.median(times)

    def torch_benchmark(self, fn: Callable[[], object], number: int = 100) -> float:
        """``torch.utils.benchmark``'s blocked runs: the host clock around back-to-back
        launches and a synchronize."""
        self.torch.cuda.synchronize()
        begin = self.host_ns
        for _ in range(number):
            fn()
        self.torch.cuda.synchronize()
        return (self.host_ns - begin) / number

    # -- NVML -----------------------------------------------------------------------------

    def nvml(
        self,
        reasons: Callable[[FakeGpu], int] = lambda gpu: 0,
        processes: Callable[[FakeGpu], Sequence[int]] = lambda gpu: (),
        **overrides: Any,
    ) -> Any:
        """A fake ``pynvml`` for this GPU: clocks as the simulation has them, clock-event
        reasons from ``reasons``, this process and the PIDs ``processes`` names on the GPU;
        ``overrides`` replace any attribute."""
        return fake_nvml(
            sm_clock=lambda: self.clock_mhz,
            max_clock=self.max_mhz,
            reasons=lambda: reasons(self),
            processes=lambda: [os.getpid(), *processes(self)],
            **overrides,
        )


#: Bytes per element of the fake torch's dtypes.
ELEMENT_BYTES = {"uint8": 1, "float32": 4}

#: pynvml's NVML_SUCCESS and NVML_ERROR_NOT_SUPPORTED, per field of nvmlDeviceGetFieldValues.
NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED = 0, 3


class NVMLError(Exception):
    """pynvml's base error."""


class NVMLError_FunctionNotFound(NVMLError):
    """A symbol the installed driver's NVML lacks."""


class NVMLLibraryMismatchError(Exception):
    """pynvml raises it (not an NVMLError) when its wrappers and the library disagree."""


def fake_nvml(
    sm_clock: Callable[[], float] = lambda: 1980.0,
    max_clock: float = 1980.0,
    reasons: Callable[[], int] = lambda: 0,
    uuids: tuple[str, ...] | None = None,
    processes: Callable[[], Sequence[int]] = lambda: [os.getpid()],
    counters: Callable[[], Mapping[int, int]] | None = None,
    **overrides: Any,
) -> Any:
    """A stand-in for ``pynvml``. ``uuids``: the UUIDs ``nvmlDeviceGetHandleByUUID``
    finds (None: any); ``processes``: the PIDs of the compute processes on the GPU;
    ``counters``: the field values ``nvmlDeviceGetFieldValues`` has, by field id (None: a
    driver that supports none of them)."""
    opened: list[str] = []

    def by_uuid(uuid: str | bytes) -> str:
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        opened.append(text)
        if uuids is not None and text not in uuids:
            raise NVMLError(f"no device {text}")
        return "handle"

    def field_values(handle: Any, ids: Sequence[int]) -> list[SimpleNamespace]:
        known = counters() if counters is not None else {}
        return [
            SimpleNamespace(
                fieldId=i,
                nvmlReturn=NVML_SUCCESS if i in known else NVML_ERROR_NOT_SUPPORTED,
                value=SimpleNamespace(ullVal=known.get(i, 0)),
            )
            for i in ids
        ]

    nvml = SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_FunctionNotFound=NVMLError_FunctionNotFound,
        NVMLLibraryMismatchError=NVMLLibraryMismatchError,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        NVML_SUCCESS=NVML_SUCCESS,
        nvmlInit=lambda: None,
        nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetClockInfo=lambda h, which: sm_clock() if which == 1 else 3201.0,
        nvmlDeviceGetMaxClockInfo=lambda h, which: max_clock if which == 1 else 3201.0,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: reasons(),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: reasons(),
        nvmlDeviceGetTemperature=lambda h, sensor: 41,
        nvmlDeviceGetPowerUsage=lambda h: 350_500,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 700_000,
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in processes()
        ],
        nvmlDeviceGetFieldValues=field_values,
        opened=opened,
    )
    for name, value in overrides.items():
        setattr(nvml, name, value)
    return nvml


def raising(error: type[BaseException]) -> Callable[..., Any]:
    """An NVML call that fails with ``error``."""

    def call(*args: Any) -> Any:
        raise error("not here")

    return call


def doubling_spec(
    name: str = "double",
    gpu: FakeGpu | None = None,
    kernel_ns: float = 10_000.0,
    configs: tuple[Any, ...] = (),
    autotune: Callable[[], Any] | None = None,
    log: list[str] | None = None,
    workloads: dict[str, tuple[dict[str, Any], ...]] | None = None,
    evicts: bool = False,
) -> Any:
    """A kernel spec computing ``y = 2 x`` on small CPU tensors of ``n`` elements; on ``gpu``
    each launch also costs ``kernel_ns`` of simulated GPU time (``kernel_ns(params)`` when
    callable), and its byte and FLOP models count ``size`` elements (default ``n``), so a
    case can stand for a large one without the CPU moving its bytes. With ``evicts`` each
    launch touches those bytes of simulated memory, paying for the dirty L2 lines it evicts.
    ``autotune()`` is the config a launch without one picks (the autotuner, whose choice
    may differ run to run); ``log`` records each launch as ``launch <config>``."""
    import torch

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig

    def launch(t: Any, o: Any, p: Any, cfg: Any) -> Any:
        chosen = cfg if cfg is not None else (autotune() if autotune else LaunchConfig({}))
        if log is not None:
            log.append(f"launch {'autotune' if cfg is None else chosen.label()}")
        o["y"].copy_(2.0 * t["x"])
        if gpu is not None:
            size = int(p.get("size", p["n"]))
            footprint = 2 * t["x"].element_size() * size if evicts else 0.0
            ns = kernel_ns(p) if callable(kernel_ns) else kernel_ns
            gpu.launch(ns, footprint, f"{name}_kernel")
        return chosen

    return KernelSpec(
        name=name,
        summary="y = 2 x",
        make_inputs=lambda p, dtype, dev, gen: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": 2.0 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
        workloads=workloads or {"smoke": ({"n": 64},)},
        flops=lambda p: int(p.get("size", p["n"])),
        min_bytes=lambda p, e: 2 * e * int(p.get("size", p["n"])),
        dtypes=("fp32", "bf16"),
        configs=tuple(configs),
        pinned_config=configs[0] if configs else None,
    )
