"""Timers: turn a launch callable into a sampler that returns nanoseconds per launch.

Two backends behind one interface (:class:`Timer`): ``bind(fn)`` returns a zero-argument
sampler, and ``method`` says how it measures (part of a series' identity).

- :class:`CpuTimer` (``cpu-perf-counter``): ``perf_counter_ns`` around a synchronous call;
  what CI runs, through exactly the sampling code the GPU uses.
- :class:`CudaTimer` (``cuda-events``, ``cuda-graph``), nvbench's cold-sample scheme: on a
  dedicated stream, (1) flush L2 by zeroing a buffer twice its size, outside the timed region;
  (2) enqueue a ``torch.cuda._sleep`` spin long enough that the host has queued the start
  event, the launch and the stop event before the GPU reaches them, so host launch latency
  is never timed; (3) time between the events. The spin length adapts to the host time the
  enqueue took (:func:`next_backlog_ns`). In graph mode the launches are captured into a CUDA
  graph of enough back-to-back launches to dwarf the events' ~0.5 us resolution, and one
  replay is timed and divided by the launch count; those launches share L2, so graph mode
  is always ``warm``.

The CUDA backend is a thin layer: every decision in it (flush size, spin length, graph size)
is a pure function below, tested on the CPU.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from kernelwatch.harness.records import Method
from kernelwatch.harness.timing.sampling import Collected, StopRule, collect, warm_up
from kernelwatch.harness.timing.telemetry import Probe, State, sampled

#: Bumped whenever a change could move measured times: a new version starts new series.
HARNESS_VERSION = 1

CPU_TIMER, EVENTS_TIMER, GRAPH_TIMER = "cpu-perf-counter", "cuda-events", "cuda-graph"
COLD, WARM = "cold", "warm"

#: Flush size when the device does not report its L2: covers twice B200's ~126 MB.
DEFAULT_FLUSH_BYTES = 256 << 20
#: Smallest and largest GPU spin before the start event.
MIN_BACKLOG_NS, MAX_BACKLOG_NS = 20_000.0, 10_000_000.0
#: A graph replay should last this long, so event resolution is under 0.5% of it.
GRAPH_TARGET_NS, MAX_GRAPH_LAUNCHES = 100_000.0, 1000


class Timer(Protocol):
    """A timing backend: ``bind(fn)`` returns a sampler giving nanoseconds per launch."""

    method: Method

    def bind(self, fn: Callable[[], object]) -> Callable[[], float]: ...


class CpuTimer:
    """Host wall clock around a synchronous call (the CPU and Triton's interpreter)."""

    method = Method(CPU_TIMER, WARM, HARNESS_VERSION)

    def bind(self, fn: Callable[[], object]) -> Callable[[], float]:
        def sample() -> float:
            start = time.perf_counter_ns()
            fn()
            return float(time.perf_counter_ns() - start)

        return sample


def flush_bytes(l2_bytes: int | None) -> int:
    """The L2 flush buffer: twice the L2 the device reports, so nothing survives the flush."""
    return 2 * l2_bytes if l2_bytes else DEFAULT_FLUSH_BYTES


def next_backlog_ns(current_ns: float, host_enqueue_ns: float) -> float:
    """The GPU spin for the next sample: twice the longest host enqueue seen so far (the
    start event, the launch, the stop event), so the GPU never waits for the host inside the
    timed region; it only grows, within [MIN_BACKLOG_NS, MAX_BACKLOG_NS]."""
    return min(MAX_BACKLOG_NS, max(current_ns, MIN_BACKLOG_NS, 2.0 * host_enqueue_ns))


def graph_launches(launch_ns: float) -> int:
    """How many launches one graph replay holds, given one launch's time."""
    if launch_ns <= 0:
        return MAX_GRAPH_LAUNCHES
    return max(1, min(MAX_GRAPH_LAUNCHES, math.ceil(GRAPH_TARGET_NS / launch_ns)))


def resolve_method(kind: str, timer: str, l2: str | None) -> tuple[str, str]:
    """The (timer, l2) a request means on a device of ``kind``; raises ValueError with what
    to ask for instead. ``auto`` is events on a GPU, the perf counter on the CPU; L2 defaults
    to cold where it can be flushed."""
    if timer == "auto":
        timer = EVENTS_TIMER if kind == "cuda" else CPU_TIMER
    if timer not in (CPU_TIMER, EVENTS_TIMER, GRAPH_TIMER):
        raise ValueError(
            f"unknown timer {timer!r}; use auto, {EVENTS_TIMER}, {GRAPH_TIMER} or {CPU_TIMER}"
        )
    if kind != "cuda" and timer != CPU_TIMER:
        raise ValueError(f"timer {timer!r} needs a CUDA GPU; on the CPU use {CPU_TIMER} or auto")
    if kind == "cuda" and timer == CPU_TIMER:
        raise ValueError(f"{CPU_TIMER} would time asynchronous launches on a GPU; use auto")
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
    hidden behind a GPU spin; optionally a CUDA graph of back-to-back launches."""

    def __init__(self, l2: str, graph: bool, l2_bytes: int | None) -> None:
        import torch

        self._torch = torch
        self.method = Method(GRAPH_TIMER if graph else EVENTS_TIMER, l2, HARNESS_VERSION)
        self._graph = graph
        self._stream = torch.cuda.Stream()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)
        self._flush = (
            torch.empty(flush_bytes(l2_bytes), dtype=torch.uint8, device="cuda")
            if l2 == COLD
            else None
        )
        self._cycles_per_ns = self._spin_rate()

    def _events_ns(self, enqueue: Callable[[], object]) -> float:
        """Time ``enqueue``'s GPU work between the two events, on the timer's stream."""
        with self._torch.cuda.stream(self._stream):
            self._start.record()
            enqueue()
            self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) * 1e6

    def _spin_rate(self) -> float:
        """GPU clock cycles per nanosecond of ``torch.cuda._sleep``: the highest rate seen,
        so that a spin is never shorter than asked when the clock boosts."""
        cycles = 1_000_000
        rates = [
            cycles / self._events_ns(lambda: self._torch.cuda._sleep(cycles)) for _ in range(5)
        ]
        return max(rates[1:])  # the first spin pays for waking the GPU up

    def bind(self, fn: Callable[[], object]) -> Callable[[], float]:
        launch, launches = self._capture(fn) if self._graph else (fn, 1)
        torch, stream = self._torch, self._stream
        backlog = [MIN_BACKLOG_NS]

        def sample() -> float:
            with torch.cuda.stream(stream):
                if self._flush is not None:
                    self._flush.zero_()
                torch.cuda._sleep(int(backlog[0] * self._cycles_per_ns))
                host_start = time.perf_counter_ns()
                self._start.record()
                launch()
                self._end.record()
                backlog[0] = next_backlog_ns(backlog[0], time.perf_counter_ns() - host_start)
            self._end.synchronize()
            return self._start.elapsed_time(self._end) * 1e6 / launches

        return sample

    def _capture(self, fn: Callable[[], object]) -> tuple[Callable[[], Any], int]:
        torch = self._torch
        # Lazy initialisation (cuBLAS handles, Triton's first launch, allocator growth) must
        # not happen during capture: run a few times on the capture stream first.
        for _ in range(3):
            self._events_ns(fn)
        launches = graph_launches(self._events_ns(fn))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self._stream):
            for _ in range(launches):
                fn()
        return graph.replay, launches


def make_timer(kind: str, timer: str, l2: str | None, l2_bytes: int | None) -> Timer:
    """The timer a request names, on a device of ``kind`` (``cuda`` or ``cpu``)."""
    name, l2_state = resolve_method(kind, timer, l2)
    if name == CPU_TIMER:
        return CpuTimer()
    return CudaTimer(l2_state, graph=name == GRAPH_TIMER, l2_bytes=l2_bytes)


def time_arms(
    launches: list[Callable[[], object]],
    timer: Timer,
    probe: Probe,
    rule: StopRule,
    warmup_s: float,
) -> tuple[Collected, list[State]]:
    """Warm each launch up by time, then sample them interleaved under the stopping rule.
    Returns the samples and the device states read before and after."""
    arms = [sampled(timer.bind(launch), probe) for launch in launches]
    for arm in arms:
        warm_up(arm, warmup_s)
    before = probe.state()
    collected = collect(arms, rule)
    return collected, [before, probe.state()]
