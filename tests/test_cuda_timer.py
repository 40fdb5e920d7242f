"""The CUDA timer end to end on a simulated GPU (``fakegpu.py``): what it would measure on a
real one, with host launch latency, an SM clock that idles low, quantised events and graph
replays modelled."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakegpu import FakeGpu

from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.sampling import RESOLUTION
from kernelwatch.harness.timing.telemetry import NullProbe
from kernelwatch.harness.timing.timers import (
    COLD,
    MIN_BACKLOG_NS,
    WARM,
    CudaTimer,
    time_arms,
)

KERNEL_NS = 3_000.0  # a 3 us kernel; a Triton launch costs the host 20 us


@pytest.fixture
def gpu() -> FakeGpu:
    """A simulated H200 whose clock idles at 345 MHz for its first 50 ms of work."""
    return FakeGpu()


def timer(gpu: FakeGpu, l2: str, graph: bool = False, max_mhz: float | None = 1980.0) -> CudaTimer:
    """The CUDA timer on the simulated GPU: its torch, its host clock."""
    l2_bytes = 50 << 20 if l2 == COLD else None
    return CudaTimer(l2, graph, l2_bytes, max_mhz, gpu.torch, gpu.perf_counter_ns)


def test_the_spin_is_sized_with_the_max_sm_clock_not_an_idle_calibration(gpu):
    """Built on an idle GPU (345 MHz), the timer must still spin long enough once the
    clock boosts to 1980 MHz, or host launch latency lands inside the timed region. (Warm L2:
    a cold sample's flush would hide the latency on its own.)"""
    sampler = timer(gpu, WARM).bind(gpu.kernel(KERNEL_NS))
    gpu.warm()
    timed = sampler.take()
    spin = gpu.spins[-1]
    assert spin / gpu.boost_mhz * 1e3 >= MIN_BACKLOG_NS  # it lasts the backlog at full clock
    assert timed.ns == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    # the spin, timed between two events, measured the clock the GPU ran at
    assert timed.sm_clock_mhz == pytest.approx(gpu.boost_mhz, rel=0.03)


def test_without_a_known_max_clock_the_spin_errs_long(gpu):
    sampler = timer(gpu, WARM, max_mhz=None).bind(gpu.kernel(KERNEL_NS))
    gpu.warm()
    assert sampler.take().ns == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    assert gpu.spins[-1] / gpu.boost_mhz * 1e3 >= MIN_BACKLOG_NS


def test_the_graph_is_sized_from_a_timed_replay_not_one_exposed_launch(gpu):
    """One launch timed alone includes its 20 us of host launch latency; a replay of
    back-to-back launches does not: a 3 us kernel needs ~34 launches for 100 us."""
    gpu.warm()
    sampler = timer(gpu, WARM, graph=True).bind(gpu.kernel(KERNEL_NS))
    assert sampler.launches == pytest.approx(34, abs=1)
    assert sampler.resolution_ns == pytest.approx(gpu.event_step_ns / sampler.launches)
    assert sampler.take().ns == pytest.approx(KERNEL_NS, rel=0.01)


def test_a_host_hiccup_is_retaken_and_the_backlog_shrinks_again(gpu):
    """One enqueue that takes 2 ms (a page fault, a GC pause) outruns the spin: that sample
    would time the hiccup, so it is taken again; later samples go back to a short spin
    instead of paying 4 ms of spin each for the rest of the run."""
    sampler = timer(gpu, COLD).bind(gpu.kernel(KERNEL_NS))
    gpu.warm()
    gpu.host_hiccups = {gpu.launches + 5: 2e6}
    times = [sampler.take().ns for _ in range(80)]
    assert max(times) == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    assert gpu.launches == 81  # the exposed sample was taken once more
    longest = max(gpu.spins) / gpu.boost_mhz * 1e3
    assert longest >= 4e6  # it grew to twice the hiccup...
    assert gpu.spins[-1] / gpu.boost_mhz * 1e3 < 2 * MIN_BACKLOG_NS  # ...and shrank back


def test_a_microsecond_kernel_on_events_stops_at_the_resolution_not_converged(gpu):
    gpu.warm()
    rule = replace(BenchOptions().resolved("cuda").rule, min_time_s=0.0, budget_s=0.05)
    collected, _ = time_arms(
        [gpu.kernel(1_200.0)], timer(gpu, COLD), NullProbe(), rule, 0.0, gpu.monotonic, gpu.sleep
    )
    assert collected.stop == RESOLUTION
    assert collected.resolution_ns == gpu.event_step_ns


def test_do_bench_s_cache_flush_keeps_the_host_ahead_of_a_microsecond_kernel(gpu):
    """What docs/TIMING.md now says of do_bench: it zeroes a 256 MiB buffer before each
    launch on the same stream, which keeps the GPU busy while the host records the start
    event and launches, so a 3 us kernel's 20 us launch latency is not timed. Events around
    a launch on an idle stream, with nothing queued before them, do time it."""
    gpu.warm()
    assert gpu.do_bench(gpu.kernel(KERNEL_NS)) == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    torch = gpu.torch
    start, end = torch.cuda.Event(True), torch.cuda.Event(True)
    start.record()
    gpu.launch(KERNEL_NS)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) * 1e6 > KERNEL_NS + gpu.launch_host_ns / 2
