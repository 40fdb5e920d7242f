"""The CUDA timer end to end on a simulated GPU (``fakegpu.py``): what it would measure on a
real one, with host launch latency, an SM clock that idles low, quantised events, graph
replays and the dirty lines a write flush leaves in L2 modelled."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakegpu import FakeGpu

from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.sampling import RESOLUTION, TIMEOUT, StopRule, summarize_collected
from kernelwatch.harness.timing.telemetry import NullProbe, open_probe, sampled, summarize_telemetry
from kernelwatch.harness.timing.timers import (
    COLD,
    MIN_BACKLOG_NS,
    READ_FLUSH,
    TRAIL_SPIN_NS,
    WARM,
    WRITE_FLUSH,
    CudaTimer,
    time_arms,
    time_flushes,
)

KERNEL_NS = 3_000.0  # a 3 us kernel; a Triton launch costs the host 20 us
#: A memory-bound kernel touching 24 MiB (about half an H200's L2) in 10 us.
L2_SIZED_NS, L2_SIZED_BYTES = 10_000.0, 24 << 20
#: A stopping rule short enough for the simulation: 10 ms of sampling, 50 ms at most.
QUICK = StopRule(
    min_samples=10, min_time_s=0.0, target_rel_ci=0.005, budget_s=0.01, timeout_s=0.05,
    throttle_pause_s=0.0,
)  # fmt: skip


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
    spin = gpu.spins[-2]  # the last one is the trailing spin
    assert spin / gpu.boost_mhz * 1e3 >= MIN_BACKLOG_NS  # it lasts the backlog at full clock
    assert timed.ns == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    # the spins, timed between events, measured the clock the GPU ran at
    assert timed.sm_clock_mhz == pytest.approx(gpu.boost_mhz, rel=0.03)
    assert timed.low_sm_clock_mhz == pytest.approx(gpu.boost_mhz, rel=0.03)


def test_without_a_known_max_clock_the_spin_errs_long(gpu):
    sampler = timer(gpu, WARM, max_mhz=None).bind(gpu.kernel(KERNEL_NS))
    gpu.warm()
    assert sampler.take().ns == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    assert gpu.spins[-2] / gpu.boost_mhz * 1e3 >= MIN_BACKLOG_NS


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
    assert gpu.spins[-2] / gpu.boost_mhz * 1e3 < 2 * MIN_BACKLOG_NS  # ...and shrank back


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


def test_a_clock_drop_inside_the_kernel_shows_in_the_spin_after_it(gpu):
    """A power-cap drop to 1000 MHz that starts with the kernel and lasts while the GPU is
    busy: the spin before the start event ran at full clock, so a clock read there alone
    called the sample unthrottled; the trailing spin, timed after the stop event, sees the
    drop. The sample's clock is the mean of the two, and it is throttled."""
    probe = open_probe("GPU-1", gpu.nvml())
    sampler = timer(gpu, WARM).bind(gpu.kernel(KERNEL_NS))
    gpu.warm()
    launched = gpu.launches + 1  # the sample's own kernel
    gpu.clock_override = lambda g: 1000.0 if g.launches == launched and g.busy else g.boost_mhz
    sample = sampled(sampler.take, probe)()
    assert sample.throttled
    assert sample.sm_clock_mhz == pytest.approx((gpu.boost_mhz + 1000.0) / 2, rel=0.03)
    assert sample.ns == pytest.approx(KERNEL_NS, abs=gpu.event_step_ns)
    # what it costs: one 20 us spin at full clock per sample
    assert gpu.spins[-1] / gpu.max_mhz * 1e3 == pytest.approx(TRAIL_SPIN_NS, abs=1.0)


def test_a_slowdown_in_force_only_while_the_gpu_works_flags_its_samples(gpu):
    """A hardware slowdown (0x8) that engages under load and lets go once the GPU idles:
    NVML's readings before and after each sample, taken with the GPU idle, never see it;
    the one the timer takes while the GPU runs the sample does."""
    probe = open_probe("GPU-1", gpu.nvml(reasons=lambda g: 0x8 if g.busy else 0x0))
    gpu.warm()
    collected, _ = time_arms(
        [gpu.kernel(KERNEL_NS)], timer(gpu, COLD), probe, QUICK, 0.0, gpu.monotonic, gpu.sleep
    )
    samples = collected.arms[0]
    assert collected.stop == TIMEOUT
    assert all(s.throttled and s.throttle_reasons == 0x8 for s in samples)


def test_another_process_during_the_samples_flags_them_and_the_record_counts_it(gpu):
    """A second compute process (PID 4242) on the GPU for three samples in the middle of a
    measurement: the device's states read before and after it miss the process; each
    sample's readings see it, flag those samples and count it in the telemetry."""
    gpu.warm()
    first = gpu.launches + 4  # after the warm-up launch and a few samples
    window = range(first, first + 3)
    probe = open_probe(
        "GPU-1", gpu.nvml(processes=lambda g: [4242] if g.launches in window else [])
    )
    collected, states = time_arms(
        [gpu.kernel(KERNEL_NS)], timer(gpu, COLD), probe, QUICK, 0.0, gpu.monotonic, gpu.sleep
    )
    samples = collected.arms[0]
    assert [s.other_processes for s in states] == [0, 0]
    flagged = [i for i, s in enumerate(samples) if s.throttled]
    # a sample reads the GPU before and after its launch: the window touches one more
    assert len(flagged) == len(window) + 1
    assert all(samples[i].other_processes == 1 for i in flagged)
    telemetry = summarize_telemetry(True, samples, states)
    assert telemetry.other_processes == 1
    assert summarize_collected(collected).n == len(samples) - len(flagged)


def test_the_read_flush_leaves_no_dirty_lines_for_the_kernel_to_write_back(gpu):
    """Zeroing a buffer twice the L2 leaves L2 full of dirty lines; a kernel touching 24 MiB
    writes 24 MiB of them back while it runs, 8 us on top of its 10 us. Reading the buffer
    leaves clean lines, and the kernel times as itself."""
    kernel = gpu.kernel(L2_SIZED_NS, L2_SIZED_BYTES)
    cold = timer(gpu, COLD)
    assert cold.flush == READ_FLUSH
    gpu.warm()
    read = cold.bind(kernel).take().ns
    written = cold.bind(kernel, flush=WRITE_FLUSH).take().ns
    assert read == pytest.approx(L2_SIZED_NS, abs=gpu.event_step_ns)
    write_back = L2_SIZED_BYTES / gpu.memset_gbps
    assert written == pytest.approx(L2_SIZED_NS + write_back, abs=gpu.event_step_ns)


def test_both_flushes_are_sampled_interleaved_for_the_self_check(gpu):
    gpu.warm()
    collected, _ = time_flushes(
        gpu.kernel(L2_SIZED_NS, L2_SIZED_BYTES), timer(gpu, COLD), NullProbe(), QUICK, 0.0,
        gpu.monotonic, gpu.sleep,
    )  # fmt: skip
    read, written = (summarize_collected(collected, arm) for arm in (0, 1))
    assert read is not None and written is not None
    assert read.median_ns == pytest.approx(L2_SIZED_NS, abs=gpu.event_step_ns)
    assert written.median_ns - read.median_ns == pytest.approx(
        L2_SIZED_BYTES / gpu.memset_gbps, abs=gpu.event_step_ns
    )


def test_an_unknown_flush_is_refused_naming_the_known_ones(gpu):
    with pytest.raises(ValueError, match="unknown L2 flush 'memset'; use read or write"):
        CudaTimer(COLD, False, 50 << 20, 1980.0, gpu.torch, gpu.perf_counter_ns, "memset")
    with pytest.raises(ValueError, match="unknown L2 flush"):
        timer(gpu, COLD).bind(gpu.kernel(KERNEL_NS), flush="memset")
