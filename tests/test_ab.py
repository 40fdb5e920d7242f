"""A/B interleaving: order, both sample sets, the shared stopping rule, and the device layer."""

from __future__ import annotations

from kernelwatch.harness.ab import interleave, measure_ab
from kernelwatch.harness.records import CaseId
from kernelwatch.harness.sampling import CONVERGED, Sample, StopRule
from kernelwatch.harness.telemetry import NullProbe
from kernelwatch.harness.timing import CpuTimer


def test_arms_alternate_and_both_sample_sets_come_back():
    order: list[str] = []
    clock = [0.0]

    def arm(name: str, ns: float):
        def sample() -> Sample:
            order.append(name)
            clock[0] += ns * 1e-9
            return Sample(ns)

        return sample

    rule = StopRule(min_samples=10, min_time_s=0.0, budget_s=10)
    result = interleave(arm("A", 1e6), arm("B", 1.2e6), rule, lambda: clock[0], lambda s: None)
    assert order[:6] == ["A", "B", "A", "B", "A", "B"]
    assert order == ["A", "B"] * 10
    assert len(result.a) == len(result.b) == 10
    assert result.stop == CONVERGED
    assert result.ratio == 1.2


def test_the_noisier_arm_keeps_both_sampling():
    clock = [0.0]
    noise = iter([1.0, 1.3, 0.8, 1.1] * 100)

    def quiet() -> Sample:
        clock[0] += 1e-3
        return Sample(1e6)

    def noisy() -> Sample:
        clock[0] += 1e-3
        return Sample(1e6 * next(noise))

    rule = StopRule(min_samples=10, min_time_s=0.0, budget_s=0.1)
    result = interleave(quiet, noisy, rule, lambda: clock[0], lambda s: None)
    assert result.stop == "budget"
    assert len(result.a) == len(result.b) == 50  # 0.1 s of 2 ms rounds


def test_measure_ab_times_two_specs_on_the_same_inputs(device):
    from kernelwatch.kernels.rmsnorm import RMS_NORM

    case = CaseId("builtin", "rms_norm", "smoke", {"tokens": 1, "hidden": 64}, "fp32")
    rule = StopRule(min_samples=10, min_time_s=0.0, budget_s=0.05, timeout_s=5)
    result = measure_ab(RMS_NORM, RMS_NORM, case, device, CpuTimer(), NullProbe(), rule, 0.0)
    assert len(result.a) == len(result.b) >= 10
    assert result.a_summary.n >= 10 and result.ratio > 0
    assert result.a_config == result.b_config and result.method.timer == "cpu-perf-counter"
