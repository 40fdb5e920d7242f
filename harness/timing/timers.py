"""Timers: turn a launch callable into a sampler that returns nanoseconds per launch.

Two backends behind one interface (:class:`Timer`): ``bind(fn, probe)`` returns a
:class:`Sampler` whose ``take()`` times one sample, and ``method`` says how it measures
(part of a series' identity).

- :class:`CpuTimer` (``cpu-perf-counter``): ``perf_counter_ns`` around a synchronous call;
  what CI runs, through exactly the sampling code the GPU uses.
- :class:`CpuTimeTimer` (``cpu-process-time``, asked for by name, never ``auto``): the child's
  own CPU time around a synchronous call. Time the child spends waiting for a core another
  process holds is not in it, so a planted slowdown reads the same on a loaded machine; nor
  is any time the call spends blocked, so it suits CPU-bound work (the interpreter) only.
- :class:`CudaTimer` (``cuda-events``, ``cuda-graph``), nvbench's cold-sample scheme: on a
  dedicated stream, (1) flush L2 by reading a buffer twice its size (a sum into one value),
  outside the timed region: the lines it leaves are clean, where zeroing the buffer (the
  write flush, kept as :data:`WRITE_FLUSH` for the self-check to compare) left them dirty,
  and the timed kernel paid their write-back; (2) enqueue a ``torch.cuda._sleep`` spin long
  enough that the host has queued the start event, the launch, the stop event and a short
  trailing spin before the GPU reaches them, so host launch latency is never timed; (3) time
  between the events. The spin is a number of SM cycles, converted from nanoseconds with the
  device's maximum SM clock, so it is never shorter than asked whatever the clock does;
  timed between two events, it also measures the SM clock the GPU ran at just before the
  sample, and the trailing spin, timed between the stop event and one more, the clock just
  after it (nvbench measures clock64 against globaltimer the same way; a short lead spin
  keeps the first event from waiting on the host). A clock drop inside the kernel shows in
  the second. The spin's length follows the host enqueue times of recent samples
  (:class:`Backlog`); a sample whose enqueue outran its spin is taken again. While the GPU
  runs the sample the host reads the clock-event reasons once (``Probe.read_reasons``),
  the one reading taken while the GPU is busy. In graph mode the launches are captured into
  a CUDA graph of enough back-to-back launches to dwarf the events' ~0.5 us resolution,
  sized from a timed replay, and one replay is timed and divided by the launch count; those
  launches share L2, so graph mode is always ``warm``.

The CUDA backend is a thin layer over pure decisions (flush size, spin length, graph size)
tested on the CPU, and runs end to end against a simulated GPU in the tests
(``tests/fakegpu.py``).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kernelwatch.harness.records import Method
from kernelwatch.harness.timing.sampling import Collected, StopRule, collect, warm_up
from kernelwatch.harness.timing.telemetry import Probe, State, Timed, sampled

#: Bumped whenever a change could move measured times: a new version starts new series.
#: 3: L2 flushed by reading (clean lines), samples flagged by the clock after the kernel, by
#: SW thermal slowdown, slowdown counters and other processes on the GPU.
HARNESS_VERSION = 3

CPU_TIMER, EVENTS_TIMER, GRAPH_TIMER = "cpu-perf-counter", "cuda-events", "cuda-graph"
CPU_TIME_TIMER = "cpu-process-time"
COLD, WARM = "cold", "warm"
#: How a cold sample flushes L2: by reading a buffer twice its size (the default), or by
#: zeroing it (nvbench's and do_bench's way, which leaves dirty lines; the self-check's
#: ``flush`` step times both).
READ_FLUSH, WRITE_FLUSH = "read", "write"
FLUSHES = (READ_FLUSH, WRITE_FLUSH)

#: Flush size when the device does not report its L2: covers twice B200's ~126 MB.
DEFAULT_FLUSH_BYTES = 256 << 20
#: Smallest and largest GPU spin before the start event. The smallest also bounds how well
#: the spin measures the SM clock: one event step (0.5 us) in 50 us is 1%.
MIN_BACKLOG_NS, MAX_BACKLOG_NS = 50_000.0, 10_000_000.0
#: How many recent host enqueue times the spin follows: one slow enqueue (a page fault, a
#: garbage collection) lengthens the spin for this many samples, then ages out.
BACKLOG_WINDOW = 32
#: Times a sample whose enqueue outran its spin is taken again before it is kept anyway.
EXPOSED_RETRIES = 2
#: A short spin before the timed spin's first event: it keeps the GPU busy while the host
#: enqueues the timed spin, so that event marks the spin's start, not the host's lag.
LEAD_SPIN_NS = 10_000.0
#: The spin after the stop event, timed to read the SM clock just after the kernel: one
#: event step (0.5 us) in 20 us is 2.5%, far inside the 25% margin a throttled clock falls
#: under, for 20 us of GPU time per sample.
TRAIL_SPIN_NS = 20_000.0
#: The SM clock assumed when the device's maximum is unknown: above every NVIDIA GPU's
#: boost clock, so the spin errs long.
FALLBACK_MAX_SM_CLOCK_MHZ = 3000.0
#: CUDA events' resolution (the CUDA runtime documents "around 0.5 microseconds").
EVENT_RESOLUTION_NS = 500.0
#: A graph replay should last this long, so event resolution is under 0.5% of it.
GRAPH_TARGET_NS, MAX_GRAPH_LAUNCHES = 100_000.0, 1000
#: Launches in the graph whose timed replay sizes the real one.
GRAPH_PROBE_LAUNCHES = 8


@dataclass(frozen=True)
class Sampler:
    """A launch bound to a timer: ``take()`` times one sample. ``resolution_ns`` is the
    smallest step its times move in; ``launches`` how many launches one sample holds."""

    take: Callable[[], Timed]
    resolution_ns: float
    launches: int = 1


class Timer(Protocol):
    """A timing backend: ``bind(fn, probe)`` returns a :class:`Sampler` of ``fn``; a timer
    that times asynchronous work reads ``probe``'s clock-event reasons while it runs."""

    method: Method

    def bind(self, fn: Callable[[], object], probe: Probe | None = None) -> Sampler: ...


class CpuTimer:
    """Host wall clock around a synchronous call (the CPU and Triton's interpreter)."""

    method = Method(CPU_TIMER, WARM, HARNESS_VERSION)
    clock: Callable[[], int] = staticmethod(time.perf_counter_ns)

    def bind(self, fn: Callable[[], object], probe: Probe | None = None) -> Sampler:
        # Synchronous: the probe's readings before and after already bracket the call.
        clock = self.clock

        def take() -> Timed:
            start = clock()
            fn()
            return Timed(float(clock() - start))

        return Sampler(take, resolution_ns=1.0)


class CpuTimeTimer(CpuTimer):
    """The child process's CPU time (every thread of it) around a synchronous call: a
    time slice another process takes while the call runs is not counted."""

    method = Method(CPU_TIME_TIMER, WARM, HARNESS_VERSION)
    clock: Callable[[], int] = staticmethod(time.process_time_ns)


def flush_bytes(l2_bytes: int | None) -> int:
    """The L2 flush buffer: twice the L2 the device reports, so nothing survives the flush."""
    return 2 * l2_bytes if l2_bytes else DEFAULT_FLUSH_BYTES


def spin_cycles(spin_ns: float, max_sm_clock_mhz: float | None) -> int:
    """SM cycles that last at least ``spin_ns`` at any clock up to the device's maximum
    (a spin calibrated at the idle clock would be ~6x too short once the GPU boosts)."""
    return math.ceil(spin_ns * (max_sm_clock_mhz or FALLBACK_MAX_SM_CLOCK_MHZ) / 1000.0)


class Backlog:
    """The GPU spin before each sample: twice the longest host enqueue (start event, launch,
    stop event) among the last :data:`BACKLOG_WINDOW` samples, within [MIN_BACKLOG_NS,
    MAX_BACKLOG_NS]. Decided before each sample, so it grows after a slow enqueue and
    shrinks again once that one has aged out."""

    def __init__(self, window: int = BACKLOG_WINDOW) -> None:
        self._recent: deque[float] = deque(maxlen=window)

    def spin_ns(self) -> float:
        longest = max(self._recent, default=0.0)
        return min(MAX_BACKLOG_NS, max(MIN_BACKLOG_NS, 2.0 * longest))

    def observe(self, enqueue_ns: float) -> None:
        self._recent.append(enqueue_ns)


def graph_launches(launch_ns: float) -> int:
    """How many launches one graph replay holds, given one launch's GPU time."""
    if launch_ns <= 0:
        return MAX_GRAPH_LAUNCHES
    return max(1, min(MAX_GRAPH_LAUNCHES, math.ceil(GRAPH_TARGET_NS / launch_ns)))


def resolve_method(kind: str, timer: str, l2: str | None) -> tuple[str, str]:
    """The (timer, l2) a request means on a device of ``kind``; raises ValueError with what
    to ask for instead. ``auto`` is events on a GPU, the perf counter on the CPU; L2 defaults
    to cold where it can be flushed."""
    if timer == "auto":
        timer = EVENTS_TIMER if kind == "cuda" else CPU_TIMER
    host_timers = (CPU_TIMER, CPU_TIME_TIMER)
    if timer not in (*host_timers, EVENTS_TIMER, GRAPH_TIMER):
        raise ValueError(
            f"unknown timer {timer!r}; use auto, {EVENTS_TIMER}, {GRAPH_TIMER}, {CPU_TIMER} "
            f"or {CPU_TIME_TIMER}"
        )
    if kind != "cuda" and timer not in host_timers:
        raise ValueError(
            f"timer {timer!r} needs a CUDA GPU; on the CPU use {CPU_TIMER}, {CPU_TIME_TIMER} "
            "or auto"
        )
    if kind == "cuda" and timer in host_timers:
        raise ValueError(f"{timer} would time asynchronous launches on a GPU; use auto")
    natural = COLD if timer == EVENTS_TIMER else WARM
    l2 = l2 or natural
    if l2 not in (COLD, WARM):
        raise ValueError(f"unknown L2 state {l2!r}; use {COLD} or {WARM}")
    if l2 != natural and timer != EVENTS_TIMER:
        raise ValueError(
            f"{timer} cannot flush L2 between launches; use --l2 {WARM} or --timer {EVENTS_TIMER}"
        )
    return timer, l2


class CudaTimer:
    """CUDA events on a dedicated stream, L2 flushed (cold) or not (warm), launch latency
    hidden behind a GPU spin; optionally a CUDA graph of back-to-back launches.
    ``max_sm_clock_mhz`` is the device's maximum SM clock (NVML), None when unknown.
    ``flush`` is how a cold sample flushes L2 (:data:`READ_FLUSH` or :data:`WRITE_FLUSH`);
    ``bind`` may ask for the other one. ``torch_module`` and ``host_ns`` are torch and the
    host's clock (a simulated GPU's in the tests)."""

    def __init__(
        self,
        l2: str,
        graph: bool,
        l2_bytes: int | None,
        max_sm_clock_mhz: float | None,
        torch_module: Any = None,
        host_ns: Callable[[], int] = time.perf_counter_ns,
        flush: str = READ_FLUSH,
    ) -> None:
        if torch_module is None:
            import torch as torch_module

        _check_flush(flush)
        torch = self._torch = torch_module
        self._host_ns = host_ns
        self.method = Method(GRAPH_TIMER if graph else EVENTS_TIMER, l2, HARNESS_VERSION)
        self.flush = flush
        self._graph = graph
        self._max_sm_clock_mhz = max_sm_clock_mhz
        self._stream = torch.cuda.Stream()
        self._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self._buffer: Any = None
        self._sum: Any = None
        if l2 == COLD:
            # Zeroed once, so the read flush sums the same finite values every time.
            self._buffer = torch.zeros(
                flush_bytes(l2_bytes) // 4, dtype=torch.float32, device="cuda"
            )
            self._sum = torch.zeros((), dtype=torch.float32, device="cuda")

    def flush_by_reading(self) -> None:
        """Evict L2 by reading the buffer into one sum: the lines left behind are clean, so
        the next kernel's misses drop them without writing anything back."""
        assert self._buffer is not None, "a warm timer has no flush buffer"
        self._torch.sum(self._buffer, 0, out=self._sum)

    def flush_by_writing(self) -> None:
        """Evict L2 by zeroing the buffer (nvbench's and do_bench's flush): L2 is left full of
        dirty lines, written back to memory while the next kernel runs."""
        assert self._buffer is not None, "a warm timer has no flush buffer"
        self._buffer.zero_()

    def bind(
        self, fn: Callable[[], object], probe: Probe | None = None, flush: str | None = None
    ) -> Sampler:
        """A sampler of ``fn``; ``probe``'s clock-event reasons are read while the GPU runs
        each sample, and ``flush`` (None: the timer's) is how a cold sample flushes L2."""
        chosen = flush or self.flush
        _check_flush(chosen)
        flushing = None
        if self._buffer is not None:
            reads = chosen == READ_FLUSH
            flushing = self.flush_by_reading if reads else self.flush_by_writing
        backlog = Backlog()
        if not self._graph:
            return Sampler(lambda: self._sample(fn, backlog, flushing, probe), EVENT_RESOLUTION_NS)
        replay, launches = self._capture(fn, backlog, flushing)
        return Sampler(
            lambda: _per_launch(self._sample(replay, backlog, flushing, probe), launches),
            EVENT_RESOLUTION_NS / launches,
            launches,
        )

    def _sample(
        self,
        enqueue: Callable[[], object],
        backlog: Backlog,
        flushing: Callable[[], None] | None,
        probe: Probe | None,
    ) -> Timed:
        """Time ``enqueue``'s GPU work behind a spin; a sample whose host enqueue outran the
        spin (the GPU reached the start event before the last event was queued, so host
        latency may be inside, or an idle gap before the trailing spin) is taken again, with
        the longer spin that enqueue asks for."""
        for _ in range(1 + EXPOSED_RETRIES):
            spin_ns = backlog.spin_ns()
            timed, enqueue_ns = self._once(enqueue, spin_ns, flushing, probe)
            backlog.observe(enqueue_ns)
            if enqueue_ns < spin_ns:
                return timed
        return timed

    def _once(
        self,
        enqueue: Callable[[], object],
        spin_ns: float,
        flushing: Callable[[], None] | None,
        probe: Probe | None = None,
    ) -> tuple[Timed, float]:
        torch = self._torch
        before_spin, start, end, after_spin = self._events
        cycles = spin_cycles(spin_ns, self._max_sm_clock_mhz)
        trail = spin_cycles(TRAIL_SPIN_NS, self._max_sm_clock_mhz)
        with torch.cuda.stream(self._stream):
            if flushing is not None:
                flushing()
            torch.cuda._sleep(spin_cycles(LEAD_SPIN_NS, self._max_sm_clock_mhz))
            before_spin.record()
            torch.cuda._sleep(cycles)
            host_start = self._host_ns()
            start.record()
            enqueue()
            end.record()
            # Queued before the GPU reaches the start event (``_sample`` retakes a sample
            # whose enqueue outran its spin), so it follows the kernel with no idle gap
            # that would read as a slow clock.
            torch.cuda._sleep(trail)
            after_spin.record()
            enqueue_ns = float(self._host_ns() - host_start)
        # The GPU is still spinning or running the sample: the one reading taken while it
        # works, where a slowdown that lets go when the GPU idles is still in force.
        reasons = probe.read_reasons() if probe is not None else None
        after_spin.synchronize()
        clocks = [
            _clock(cycles, before_spin.elapsed_time(start)),
            _clock(trail, end.elapsed_time(after_spin)),
        ]
        known = [c for c in clocks if c is not None]
        # The mean stands for the clock over the region between the two readings (cycle
        # space multiplies the time by it); the lower one decides the throttle flag, since
        # a clock that fell during the kernel shows only after it.
        clock = sum(known) / len(known) if known else None
        low = min(known) if known else None
        return Timed(start.elapsed_time(end) * 1e6, clock, low, reasons), enqueue_ns

    def _capture(
        self,
        fn: Callable[[], object],
        backlog: Backlog,
        flushing: Callable[[], None] | None,
    ) -> tuple[Callable[[], Any], int]:
        """A graph of enough launches of ``fn`` for :data:`GRAPH_TARGET_NS`, sized from a
        timed replay of a small graph: timing one launch alone would include its host
        launch latency, making a 3 us kernel look like 20 us and the graph 6x too short."""
        # Lazy initialisation (cuBLAS handles, Triton's first launch, allocator growth) must
        # not happen during capture: run a few times on the capture stream first.
        for _ in range(3):
            self._once(fn, MIN_BACKLOG_NS, flushing)
        small = self._graph_of(fn, GRAPH_PROBE_LAUNCHES)
        self._once(small.replay, MIN_BACKLOG_NS, flushing)  # the first replay uploads the graph
        sized = self._sample(small.replay, backlog, flushing, None)
        launches = graph_launches(_per_launch(sized, GRAPH_PROBE_LAUNCHES).ns)
        graph = small if launches == GRAPH_PROBE_LAUNCHES else self._graph_of(fn, launches)
        return graph.replay, launches

    def _graph_of(self, fn: Callable[[], object], launches: int) -> Any:
        torch = self._torch
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self._stream):
            for _ in range(launches):
                fn()
        return graph


def _check_flush(flush: str) -> None:
    if flush not in FLUSHES:
        raise ValueError(f"unknown L2 flush {flush!r}; use {READ_FLUSH} or {WRITE_FLUSH}")


def _clock(cycles: int, elapsed_ms: float) -> float | None:
    """The SM clock (MHz) of a spin of ``cycles`` timed at ``elapsed_ms``."""
    return cycles / (elapsed_ms * 1e6) * 1000.0 if elapsed_ms > 0 else None


def _per_launch(timed: Timed, launches: int) -> Timed:
    return replace(timed, ns=timed.ns / launches)


def make_timer(
    kind: str, timer: str, l2: str | None, l2_bytes: int | None, max_sm_clock_mhz: float | None
) -> Timer:
    """The timer a request names, on a device of ``kind`` (``cuda`` or ``cpu``)."""
    name, l2_state = resolve_method(kind, timer, l2)
    if name == CPU_TIMER:
        return CpuTimer()
    if name == CPU_TIME_TIMER:
        return CpuTimeTimer()
    return CudaTimer(l2_state, name == GRAPH_TIMER, l2_bytes, max_sm_clock_mhz)


def time_arms(
    launches: Sequence[Callable[[], object]],
    timer: Timer,
    probe: Probe,
    rule: StopRule,
    warmup_s: float,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> tuple[Collected, list[State]]:
    """Warm each launch up by time, then sample them interleaved under the stopping rule.
    Returns the samples and the device states read before and after."""
    samplers = [timer.bind(launch, probe) for launch in launches]
    return _time_samplers(samplers, probe, rule, warmup_s, clock, pause)


def time_flushes(
    fn: Callable[[], object],
    timer: CudaTimer,
    probe: Probe,
    rule: StopRule,
    warmup_s: float,
    clock: Callable[[], float] = time.monotonic,
    pause: Callable[[float], None] = time.sleep,
) -> tuple[Collected, list[State]]:
    """``fn`` sampled cold with each L2 flush of :data:`FLUSHES`, interleaved (one arm each,
    in that order), so drift hits both alike and their medians differ by the flush alone."""
    samplers = [timer.bind(fn, probe, flush) for flush in FLUSHES]
    return _time_samplers(samplers, probe, rule, warmup_s, clock, pause)


def _time_samplers(
    samplers: Sequence[Sampler],
    probe: Probe,
    rule: StopRule,
    warmup_s: float,
    clock: Callable[[], float],
    pause: Callable[[float], None],
) -> tuple[Collected, list[State]]:
    arms = [sampled(sampler.take, probe) for sampler in samplers]
    for arm in arms:
        warm_up(arm, warmup_s, clock)
    before = probe.state()
    resolution = max(sampler.resolution_ns for sampler in samplers)
    collected = collect(arms, rule, clock, pause, resolution)
    return collected, [before, probe.state()]
