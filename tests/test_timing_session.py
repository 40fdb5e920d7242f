"""One case's timing in-process on the CPU: ceilings that fail, the cool-down's place, the
config an A/B's two sides launch, and the config bench times after a check."""

from __future__ import annotations

import itertools

import pytest
import torch
from fakegpu import doubling_spec

from kernelwatch.analysis.verdict import compare_measurements
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.device import Device
from kernelwatch.harness.records import LaunchConfig, SoftwareInfo
from kernelwatch.harness.suite import Task
from kernelwatch.harness.timing.ab import ABSession
from kernelwatch.harness.timing.case import BenchSession
from kernelwatch.harness.timing.pinning import pins_from_records
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.telemetry import NullProbe
from kernelwatch.harness.timing.timers import CpuTimer

SOFTWARE = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", None, None)
QUICK = {"min_samples": 5, "min_time_s": 0.0, "budget_s": 0.01, "warmup_s": 0.0}
SMALL, BIG = LaunchConfig({"BLOCK": 64}, 4, 2), LaunchConfig({"BLOCK": 128}, 8, 3)


@pytest.fixture
def tuning(device) -> Device:
    """The CPU, letting kernels choose their config as a GPU does (the specs here "autotune"
    by picking from a script, so nothing needs a GPU)."""
    return Device(device.torch_device, device.info, can_autotune=True)


def test_a_failed_ceiling_is_not_measured_and_the_run_goes_on(device, monkeypatch):
    """An 8192^3 GEMM that runs out of memory used to kill ``bench --measure-ceilings``
    and the self-check; now it is "not measured" and the copy ceiling and every case stay."""

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 128.00 MiB")

    monkeypatch.setattr(torch, "matmul", out_of_memory)
    options = BenchOptions(measure_ceilings=True, **QUICK, cool_down_s=0.0)
    session = BenchSession.open(device, options, SOFTWARE)
    ceilings = session.ceilings
    assert ceilings is not None and ceilings.copy_gbps > 0
    assert ceilings.bf16_tflops is None
    assert ceilings.problems == (
        "bf16 GEMM: OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB",
    )
    record = session.measure(doubling_spec(), "s", "smoke", {"n": 64}, "fp32", 0)
    assert record.status == "ok"


def test_the_cool_down_comes_after_the_config_fixing_launch(tuning):
    """Autotuning runs the GPU at full load: cooling down before it leaves the timed
    samples to start hot."""
    log: list[str] = []
    options = BenchOptions(**QUICK, cool_down_s=0.25, baseline=False)
    session = BenchSession(
        tuning, options, SOFTWARE, CpuTimer(), NullProbe(), sleep=lambda s: log.append(f"cool {s}")
    )
    spec = doubling_spec(configs=(SMALL, BIG), autotune=lambda: BIG, log=log)
    session.measure(spec, "s", "smoke", {"n": 64}, "fp32", 0)
    assert log[:3] == ["launch autotune", "cool 0.25", f"launch {BIG.label()}"]


def _pair(device, spec_a, spec_b):
    session = ABSession(device, BenchOptions(**QUICK, cool_down_s=0.0), SOFTWARE, CpuTimer(),
                        NullProbe())  # fmt: skip
    task = Task("double", "smoke", {"n": 64}, "fp32", 1e-5)
    return session.measure_pair(spec_a, spec_b, "s", task, 0)


def test_an_a_a_pair_launches_one_config_on_both_sides(tuning):
    """Each side autotuning on its own flips between near-tied configs, and an A/A pair
    reads as a regression; B launches the config A's autotuner chose."""
    flips = itertools.cycle([SMALL, BIG])
    spec = doubling_spec(configs=(SMALL, BIG), autotune=lambda: next(flips))
    pair = _pair(tuning, spec, spec)
    assert pair.status == "ok", pair.reason
    assert pair.base.config == pair.head.config == SMALL
    assert (pair.base.config_source, pair.head.config_source) == ("autotune", "shared")
    assert "configs differed" not in compare_measurements(pair.base, pair.head).reason


def test_when_b_lacks_as_config_the_verdict_says_the_configs_differed(tuning):
    other = LaunchConfig({"BLOCK": 256}, 8, 4)
    spec_a = doubling_spec(configs=(SMALL, BIG), autotune=lambda: SMALL)
    spec_b = doubling_spec(configs=(other,), autotune=lambda: other)
    pair = _pair(tuning, spec_a, spec_b)
    assert (pair.base.config, pair.head.config) == (SMALL, other)
    assert pair.head.config_source == "autotune"
    reason = compare_measurements(pair.base, pair.head).reason
    assert "the configs differed (A BLOCK=64,w4,s2, B BLOCK=256,w8,s4)" in reason


def test_bench_times_the_config_the_check_verified(tuning):
    """Check and bench run in separate processes and would each autotune: bench takes the
    check's verified configs as pins."""
    picks = iter([BIG, SMALL])  # the check's autotuner picks BIG; a new one would pick SMALL
    spec = doubling_spec(configs=(SMALL, BIG), autotune=lambda: next(picks))
    checked = check_case(spec, "s", "smoke", {"n": 64}, "fp32", tuning, 0, SOFTWARE)
    assert checked.verdict == "pass" and checked.config == BIG
    options = BenchOptions(**QUICK, cool_down_s=0.0, pins=pins_from_records([checked]),
                           pin_source="checked")  # fmt: skip
    session = BenchSession(tuning, options, SOFTWARE, CpuTimer(), NullProbe())
    timed = session.measure(spec, "s", "smoke", {"n": 64}, "fp32", 0)
    assert (timed.config, timed.config_source) == (BIG, "checked")


@pytest.mark.parametrize("pin", [SMALL, BIG])
def test_a_check_launches_a_pinned_config(device, pin):
    spec = doubling_spec(configs=(SMALL, BIG), autotune=lambda: SMALL)
    result = check_case(spec, "s", "smoke", {"n": 64}, "fp32", device, 0, SOFTWARE, pin)
    assert result.verdict == "pass" and result.config == pin


def _work_todo(spec):
    from dataclasses import replace

    from kernelwatch.harness.spec import KernelUnsupported

    def todo(*args):
        raise KernelUnsupported("double: flops is a TODO in kernelwatch_suite.py")

    return replace(spec, flops=todo)


def test_a_case_whose_work_is_a_todo_is_unsupported_before_any_sample(device):
    """``init`` writes ``flops`` and ``min_bytes`` as todos: bench and the A/B report the case
    ``unsupported`` saying so, instead of timing it and failing on the roofline after."""
    log: list[str] = []
    spec = _work_todo(doubling_spec(log=log))
    options = BenchOptions(**QUICK, cool_down_s=0.0, baseline=False)
    session = BenchSession(device, options, SOFTWARE, CpuTimer(), NullProbe())
    record = session.measure(spec, "s", "smoke", {"n": 64}, "fp32", 0)
    assert (record.status, record.reason) == (
        "unsupported",
        "double: flops is a TODO in kernelwatch_suite.py",
    )
    assert len(log) <= 1  # the config-fixing launch at most, no sample
    pair = _pair(device, doubling_spec(), spec)
    assert (pair.status, pair.reason) == (
        "unsupported",
        "B: double: flops is a TODO in kernelwatch_suite.py",
    )
