"""Timer backends: the CPU timer end to end, and the pure decisions the CUDA timer rests on."""

from __future__ import annotations

import time

import pytest

from kernelwatch.harness.timing.timers import (
    BACKLOG_WINDOW,
    DEFAULT_FLUSH_BYTES,
    FALLBACK_MAX_SM_CLOCK_MHZ,
    HARNESS_VERSION,
    MAX_BACKLOG_NS,
    MAX_GRAPH_LAUNCHES,
    MIN_BACKLOG_NS,
    Backlog,
    CpuTimer,
    CpuTimeTimer,
    flush_bytes,
    graph_launches,
    make_timer,
    resolve_method,
    spin_cycles,
)


def test_cpu_timer_measures_the_call():
    sampler = CpuTimer().bind(lambda: time.sleep(0.002))
    timed = sampler.take()
    assert 2e6 <= timed.ns < 5e7 and timed.sm_clock_mhz is None
    assert sampler.resolution_ns == 1.0
    assert CpuTimer.method.label() == f"cpu-perf-counter/warm/h{HARNESS_VERSION}"


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_cpu_time_timer_counts_the_childs_own_cpu_not_the_time_it_waits():
    """What another process's load takes from the child is time it waits, off the CPU: the
    CPU-time timer leaves it out, where the wall clock counts it."""
    asleep = CpuTimeTimer().bind(lambda: time.sleep(0.05))
    assert asleep.take().ns < 1e7 <= 5e7 <= CpuTimer().bind(lambda: time.sleep(0.05)).take().ns
    busy = CpuTimeTimer().bind(lambda: _spin(0.02))
    timed = busy.take()
    assert 2e7 <= timed.ns < 5e7 and timed.sm_clock_mhz is None
    assert busy.resolution_ns == 1.0
    # Its own method, so its series never merge with the wall clock's.
    assert CpuTimeTimer.method.label() == f"cpu-process-time/warm/h{HARNESS_VERSION}"


def test_flush_is_twice_the_l2_or_a_safe_default():
    assert flush_bytes(50 * 2**20) == 100 * 2**20
    assert flush_bytes(None) == DEFAULT_FLUSH_BYTES >= 2 * 126_000_000


def test_backlog_follows_twice_the_recent_host_enqueues_within_bounds():
    backlog = Backlog()
    assert backlog.spin_ns() == MIN_BACKLOG_NS
    backlog.observe(1_000.0)
    assert backlog.spin_ns() == MIN_BACKLOG_NS
    backlog.observe(40_000.0)
    assert backlog.spin_ns() == 80_000.0
    for _ in range(BACKLOG_WINDOW - 1):
        backlog.observe(10_000.0)
    assert backlog.spin_ns() == 80_000.0  # the slow enqueue is still among the recent ones
    backlog.observe(10_000.0)
    assert backlog.spin_ns() == MIN_BACKLOG_NS  # ...and now it has aged out
    backlog.observe(1e9)
    assert backlog.spin_ns() == MAX_BACKLOG_NS


def test_spin_cycles_use_the_maximum_clock_or_err_long():
    assert spin_cycles(50_000.0, 1980.0) == 99_000  # 50 us at the boost clock
    assert spin_cycles(50_000.0, None) == 50 * FALLBACK_MAX_SM_CLOCK_MHZ


def test_graph_holds_enough_launches_to_dwarf_event_resolution():
    assert graph_launches(2_000.0) == 50  # 2 us kernels: 50 launches make 100 us
    assert graph_launches(500_000.0) == 1
    assert graph_launches(1.0) == MAX_GRAPH_LAUNCHES
    assert graph_launches(0.0) == MAX_GRAPH_LAUNCHES


@pytest.mark.parametrize(
    ("kind", "timer", "l2", "expected"),
    [
        ("cuda", "auto", None, ("cuda-events", "cold")),
        ("cuda", "cuda-events", "warm", ("cuda-events", "warm")),
        ("cuda", "cuda-graph", None, ("cuda-graph", "warm")),
        ("cpu", "auto", None, ("cpu-perf-counter", "warm")),
        ("cpu", "cpu-process-time", None, ("cpu-process-time", "warm")),
    ],
)
def test_method_resolution(kind, timer, l2, expected):
    assert resolve_method(kind, timer, l2) == expected


@pytest.mark.parametrize(
    ("kind", "timer", "l2", "message"),
    [
        ("cpu", "cuda-events", None, "needs a CUDA GPU"),
        ("cuda", "cuda-graph", "cold", "cannot flush L2"),
        ("cuda", "cpu-perf-counter", None, "asynchronous"),
        ("cuda", "cpu-process-time", None, "asynchronous"),
        ("cpu", "cpu-process-time", "cold", "cannot flush L2"),
        ("cuda", "nvbench", None, "unknown timer"),
        ("cpu", "auto", "lukewarm", "unknown L2 state"),
    ],
)
def test_impossible_methods_are_refused_with_what_to_do(kind, timer, l2, message):
    with pytest.raises(ValueError, match=message):
        resolve_method(kind, timer, l2)


def test_make_timer_on_the_cpu():
    assert isinstance(make_timer("cpu", "auto", None, None, None), CpuTimer)
    assert isinstance(make_timer("cpu", "cpu-process-time", None, None, None), CpuTimeTimer)
