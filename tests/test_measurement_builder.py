"""The one builder of a Measurement: what it makes of an arm's samples, that a single-GPU
case and a distributed rank's case get the same fields from the same samples, and that the
bench and A/B sessions record exactly what it builds."""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Any

import pytest
from fakegpu import doubling_spec

from kernelwatch.harness.records import (
    Bandwidth,
    CaseId,
    LaunchConfig,
    Measurement,
    SoftwareInfo,
    SpeedOfLight,
    WorldInfo,
)
from kernelwatch.harness.suite import Task
from kernelwatch.harness.timing.ab import ABSession
from kernelwatch.harness.timing.case import BenchSession, work
from kernelwatch.harness.timing.measurement import Run, ab_pair, measurement
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.sampling import (
    BUDGET,
    CONVERGED,
    TIMEOUT,
    Collected,
    Sample,
    StopRule,
)
from kernelwatch.harness.timing.telemetry import NullProbe, State
from kernelwatch.harness.timing.timers import CpuTimer

SOFTWARE = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", None, None)
CASE = CaseId("s", "double", "smoke", {"n": 64}, "fp32")
CONFIG = LaunchConfig({"BLOCK": 64}, 4, 2)
RULE = StopRule(
    min_samples=3,
    min_time_s=0.0,
    target_rel_ci=0.01,
    budget_s=1.0,
    timeout_s=2.0,
    throttle_pause_s=0.0,
    confidence=0.9,
)
STATES = (State(60.0, 300.0, 0), State(65.0, 350.0, 1))
WORLD = WorldInfo("gloo", 2, 1, "loopback", ())
SOL = SpeedOfLight(1.0, 2.0, None, None, None, None, None)
BANDWIDTH = Bandwidth("all_reduce", 1024, 1.0, 2.0, 2.0, None)


def _samples(*ns: float, throttled: tuple[int, ...] = ()) -> tuple[Sample, ...]:
    """Samples at 1800 MHz, but those at the ``throttled`` positions: 900 MHz, power-capped."""
    hot = Sample(0.0, 900.0, 2600.0, 4, True)
    return tuple(
        replace(hot, ns=v) if i in throttled else Sample(v, 1800.0, 2600.0)
        for i, v in enumerate(ns)
    )


def _common(device) -> dict[str, Any]:
    return {
        "case": CASE,
        "method": CpuTimer.method,
        "device": device.info,
        "software": SOFTWARE,
        "baseline": "torch",
    }


def _build(device, samples, stop=CONVERGED, baseline=(), **rates) -> Measurement:
    run = Run(stop, RULE, STATES, telemetry=True)
    return measurement(_common(device), run, samples, CONFIG, "autotune", 0.0, baseline, **rates)


def test_a_measurement_keeps_every_sample_and_counts_the_unthrottled_ones(device):
    samples = _samples(100.0, 500.0, 102.0, 104.0, throttled=(1,))
    m = _build(device, samples, baseline=_samples(200.0, 204.0, 208.0))
    assert (m.status, m.reason) == ("ok", "")
    assert m.samples_ns == (100.0, 500.0, 102.0, 104.0)
    assert m.throttled == (False, True, False, False)
    assert m.sm_clock_mhz == (1800.0, 900.0, 1800.0, 1800.0)
    assert m.mem_clock_mhz == (2600.0,) * 4
    assert m.summary is not None and (m.summary.n, m.summary.median_ns) == (3, 102.0)
    assert m.summary.stop == CONVERGED
    assert (m.baseline_median_ns, m.speedup) == (204.0, 2.0)
    assert m.baseline_samples_ns == (200.0, 204.0, 208.0)
    assert m.baseline_throttled == (False,) * 3
    assert (m.config, m.config_source, m.baseline) == (CONFIG, "autotune", "torch")
    assert m.telemetry is not None and m.telemetry.temperature_c == 65.0
    assert m.telemetry.throttle_reasons == 4


def test_clocks_are_kept_only_when_every_sample_has_one(device):
    samples = (Sample(100.0, 1800.0, None), Sample(101.0, None, 2600.0), Sample(102.0))
    m = _build(device, samples)
    assert (m.sm_clock_mhz, m.mem_clock_mhz) == ((), ())


def test_a_timeout_with_too_few_unthrottled_samples_says_so_and_all_throttled_is_an_error(
    device,
):
    short = _build(device, _samples(100.0, 101.0, 300.0, throttled=(2,)), stop=TIMEOUT)
    assert short.status == "ok"
    assert short.reason == (
        "only 2 of 3 samples unthrottled (SM clock down to 900 MHz; reasons sw-power-cap) "
        "when the 2 s timeout hit; the statistic rests on fewer than 3"
    )
    hot = _build(device, _samples(100.0, 101.0, throttled=(0, 1)), stop=TIMEOUT)
    assert (hot.status, hot.summary, hot.speedup) == ("error", None, None)
    assert hot.reason.startswith("all 2 samples were taken while the GPU throttled")


def test_a_sample_flagged_for_another_process_on_the_gpu_says_so(device):
    shared = Sample(300.0, 1800.0, 2600.0, None, True, other_processes=2)
    samples = (*_samples(100.0, 101.0), shared)
    short = _build(device, samples, stop=TIMEOUT)
    assert "2 other process(es) on the GPU" in short.reason


def test_the_roofline_is_asked_about_the_median_and_only_when_there_is_one(device):
    asked: list[float] = []

    def sol(median_ns: float) -> SpeedOfLight:
        asked.append(median_ns)
        return SOL

    assert _build(device, _samples(100.0, 102.0, 104.0), sol=sol).sol == SOL
    assert _build(device, _samples(100.0, throttled=(0,)), sol=sol).sol is None
    assert asked == [102.0]


def test_a_single_gpu_and_a_distributed_case_get_the_same_fields_from_the_same_samples(device):
    samples = _samples(100.0, 500.0, 102.0, 104.0, 103.0, throttled=(1,))
    baseline = _samples(200.0, 204.0, 208.0)
    run = Run(BUDGET, RULE, STATES, telemetry=True)
    single = measurement(
        _common(device), run, samples, CONFIG, "autotune", 0.0, baseline, sol=lambda _: SOL
    )
    ranks = measurement(
        {**_common(device), "world": WORLD}, run, samples, None, "heuristic", 0.0, baseline,
        bandwidth=lambda _: BANDWIDTH,
    )  # fmt: skip
    own = {"sol", "bandwidth", "world", "config", "config_source", "duration_s"}
    shared = [f.name for f in dataclasses.fields(Measurement) if f.name not in own]
    assert [getattr(single, n) for n in shared] == [getattr(ranks, n) for n in shared]
    assert (single.sol, single.bandwidth, single.world) == (SOL, None, None)
    assert (ranks.sol, ranks.bandwidth, ranks.world) == (None, BANDWIDTH, WORLD)


def test_a_pair_fails_naming_each_side_that_did_not_time(device):
    common = {k: v for k, v in _common(device).items() if k != "baseline"}
    good = _build(device, _samples(100.0, 101.0, 102.0))
    hot = _build(device, _samples(100.0, throttled=(0,)), stop=TIMEOUT)
    both = ab_pair(common, good, good, 0.0)
    assert (both.status, both.reason, both.case) == ("ok", "", CASE)
    failed = ab_pair(common, good, hot, 0.0)
    assert (failed.status, failed.base, failed.head) == ("error", good, hot)
    assert failed.reason == f"B: {hot.reason}"


QUICK = BenchOptions(min_samples=3, min_time_s=0.0, budget_s=0.01, warmup_s=0.0, cool_down_s=0.0)


def _without_duration(m: Measurement | None) -> Measurement:
    assert m is not None
    return replace(m, duration_s=0.0)


@pytest.mark.parametrize("with_baseline", [True, False])
def test_bench_records_what_the_builder_builds_from_its_samples(device, with_baseline):
    # Quantised: every counted sample equal, so the timer's 7 ns step widens the CI.
    kernel, stock = _samples(100.0, 300.0, 100.0, 100.0, throttled=(1,)), _samples(50.0, 52.0)
    arms = (kernel, stock) if with_baseline else (kernel,)
    options = replace(QUICK, baseline=with_baseline)
    session = BenchSession(device, options, SOFTWARE, CpuTimer(), NullProbe())
    session.time = lambda launches: (Collected(arms, BUDGET, 0.5, 7.0), list(STATES))
    record = session.measure(doubling_spec(), "s", "smoke", {"n": 64}, "fp32", 0)
    run = Run(BUDGET, session.resolved.rule, STATES, NullProbe().available, 7.0)
    spec = doubling_spec()
    common = {
        **_common(device),
        "method": session.method,
        "baseline": spec.baseline.name if with_baseline else None,
    }
    done = work(spec, record.case)
    built = session.record(common, done, record.case, record.config, record.config_source, run,
                           kernel, 0.0, stock if with_baseline else ())  # fmt: skip
    assert _without_duration(record) == _without_duration(built)
    assert record.summary is not None
    assert (record.summary.ci_low_ns, record.summary.ci_high_ns) == (96.5, 103.5)
    assert record.speedup == (51.0 / 100.0 if with_baseline else None)


def test_each_side_of_an_ab_pair_is_what_the_builder_builds_from_its_samples(device):
    # A quantised side's CI is not widened by the timer's step in an A/B pair.
    a, b = _samples(100.0, 100.0, 100.0), _samples(200.0, 202.0, 201.0)
    session = ABSession(device, QUICK, SOFTWARE, CpuTimer(), NullProbe())
    session.time = lambda launches: (Collected((a, b), CONVERGED, 0.5, 7.0), list(STATES))
    task = Task("double", "smoke", {"n": 64}, "fp32", 1e-5)
    pair = session.measure_pair(doubling_spec(), doubling_spec(), "s", task, 0)
    assert pair.status == "ok" and pair.base is not None and pair.head is not None
    run = Run(CONVERGED, session.resolved.rule, STATES, NullProbe().available)
    common = {**_common(device), "method": session.method, "baseline": None}
    for side, samples in ((pair.base, a), (pair.head, b)):
        config, source = side.config, side.config_source
        done = work(doubling_spec(), CASE)
        built = session.record(common, done, CASE, config, source, run, samples, 0.0)
        assert _without_duration(side) == _without_duration(built)
    assert pair.base.summary is not None and pair.base.summary.ci_high_ns == 100.0
