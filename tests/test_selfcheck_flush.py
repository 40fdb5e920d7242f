"""The self-check's ``flush`` step on a simulated H200 (``fakegpu.py``), whose L2 models the
dirty lines a write flush leaves: the same case timed with L2 flushed by reading and by
writing, and what the report gets of the difference."""

from __future__ import annotations

from typing import Any

import pytest
from fakegpu import FakeGpu, doubling_spec

from kernelwatch.harness.device import Device
from kernelwatch.harness.records import DeviceInfo, SoftwareInfo
from kernelwatch.harness.selfcheck.measure import Tools, run_measurements
from kernelwatch.harness.spec import Suite
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions
from kernelwatch.harness.timing.telemetry import open_probe
from kernelwatch.harness.timing.timers import COLD, EVENTS_TIMER, CpuTimer, CudaTimer, Timer

H200 = DeviceInfo("cuda", "NVIDIA H200", "fake-host", False, "8d1f", "9.0", 132, 50 << 20)
SOFTWARE = SoftwareInfo("0.1.0", "3.12.3", "2.11.0", "3.6.0", "13.0", "580.65")
QUICK = BenchOptions(budget_s=0.01, min_time_s=0.001, warmup_s=0.002, cool_down_s=0.001,
                     timeout_s=0.05, baseline=False)  # fmt: skip
#: 16 KiB, 256 MiB and 4 GiB moved in bf16: the middle one is the smallest at least L2-sized.
SIZES = (4096, 1 << 26, 1 << 30)
GBPS = 3700.0


def kernel_ns(params: dict[str, Any]) -> float:
    return 1_000.0 + 4 * int(params["size"]) / GBPS


def flush_step(gpu: FakeGpu, info: DeviceInfo = H200, timer: Timer | None = None) -> Any:
    """The ``flush`` step alone on ``gpu``, with the %SOL kernel and one other."""
    workloads = {"llm": tuple({"n": 64, "size": size} for size in SIZES)}
    suite = Suite(
        "fake",
        tuple(
            doubling_spec(name, gpu, kernel_ns, workloads=workloads, evicts=True)
            for name in ("rms_norm", "silu_and_mul")
        ),
    )
    cuda = CudaTimer(COLD, False, info.l2_bytes, gpu.max_mhz, gpu.torch, gpu.perf_counter_ns)
    tools = Tools(
        timer=lambda name: (timer or cuda) if name == EVENTS_TIMER else None,
        probe=open_probe(info.uuid, gpu.nvml()),
        do_bench=None,
        torch_benchmark=None,
        clock=gpu.monotonic,
        sleep=gpu.sleep,
    )
    options = SelfcheckOptions(bench=QUICK, sol_kernel="silu_and_mul", steps=("flush",))
    events: list[tuple[str, Any]] = []
    device = Device("cpu", info, can_autotune=True)
    run_measurements(suite, device, SOFTWARE, options, tools, lambda *e: events.append(e))
    return dict(events)["flush"]


def test_the_flush_step_reports_what_the_write_flush_s_dirty_lines_cost():
    """The 256 MiB case evicts the whole 50 MiB L2: after a write flush it writes all of it
    back, 17 us on top of 74 us; after the read flush it runs as itself."""
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)
    data = flush_step(gpu)
    assert set(data) == {"kernel", "case", "read_flush_ns", "write_flush_ns", "difference"}
    assert (data["kernel"], data["case"]) == ("silu_and_mul", f"n=64 size={1 << 26}")
    alone = kernel_ns({"size": 1 << 26})
    write_back = gpu.l2_bytes / gpu.memset_gbps
    assert data["read_flush_ns"] == pytest.approx(alone, rel=0.01)
    assert data["write_flush_ns"] == pytest.approx(alone + write_back, rel=0.01)
    assert data["difference"] == pytest.approx(write_back / alone, rel=0.05)


def test_without_a_known_l2_the_flush_step_takes_the_smallest_case():
    info = DeviceInfo("cuda", "NVIDIA H200", "fake-host", False, "8d1f", "9.0", 132, None)
    data = flush_step(FakeGpu(warm_after_ns=1e6), info)
    assert data["case"] == "n=64 size=4096"


def test_the_flush_step_is_skipped_where_nothing_is_flushed():
    data = flush_step(FakeGpu(), timer=CpuTimer())
    assert data == {"skipped": "flushing L2 needs the CUDA events timer with cold L2"}
