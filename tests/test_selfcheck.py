"""The GPU self-check rehearsed on the CPU, end to end: every stage's real code (the device
measurements, the checks, the A/A pairs through ``ABSession`` and ``verdict``, the judging,
the report files) against a simulated H200 (``fakegpu.py``: its torch, clocks, events and
NVML), so the first run on a GPU has only the GPU left to prove."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import date
from typing import Any

import pytest
from fakegpu import FakeGpu, doubling_spec

from kernelwatch.analysis import trust
from kernelwatch.cli.selfcheck import run_selfcheck_stages
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.device import Device
from kernelwatch.harness.isolation.kernel_child import finite
from kernelwatch.harness.isolation.supervise import BenchRequest, CheckRequest
from kernelwatch.harness.records import (
    CorrectnessResult,
    DeviceInfo,
    Measurement,
    SoftwareInfo,
)
from kernelwatch.harness.selfcheck.measure import TRACE_STEPS, Tools, run_measurements
from kernelwatch.harness.selfcheck.stages import SelfcheckPlan, gpu_slug, parse_ncu_durations
from kernelwatch.harness.spec import Suite
from kernelwatch.harness.suite import select_tasks
from kernelwatch.harness.timing.case import BenchSession
from kernelwatch.harness.timing.ceilings import CeilingLaunches
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions
from kernelwatch.harness.timing.telemetry import open_probe
from kernelwatch.harness.timing.timers import COLD, EVENTS_TIMER, GRAPH_TIMER, WARM, CudaTimer

H200 = DeviceInfo("cuda", "NVIDIA H200", "fake-host", False, "8d1f", "9.0", 132, 50 << 20)
SOFTWARE = SoftwareInfo("0.1.0", "3.12.3", "2.11.0", "3.6.0", "13.0", "580.65")
COPY_GBPS, GEMM_TFLOPS = 4300.0, 780.0


def memory_bound(gbps: float, overhead_ns: float = 1_000.0) -> Callable[[Any], float]:
    """A kernel moving ``4 size`` bytes (read and write ``size`` bf16 values) at ``gbps``."""
    return lambda p: overhead_ns + 4 * int(p.get("size", p["n"])) / gbps


KERNELS = ("rms_norm", "softmax", "silu_and_mul", "silu_and_mul_cuda", "silu_and_mul_cute",
           "gemm")  # fmt: skip


def suite(gpu: FakeGpu) -> Suite:
    """Six kernels like the built-in suite's (:data:`KERNELS`), each timed on the simulated
    GPU: 1 us, 73 us and 1.2 ms cases (their tensors stay 64 elements on the CPU)."""
    sizes = (4096, 1 << 26, 1 << 30)
    llm = {"llm": tuple({"n": 64, "size": size} for size in sizes), "smoke": ({"n": 64},)}
    return Suite(
        "fake",
        tuple(
            doubling_spec(name, gpu, memory_bound(3700.0), workloads=dict(llm)) for name in KERNELS
        ),
    )


class SimulatedBackend:
    """The self-check's stages in-process on the simulated GPU, through the same functions
    the kernel child calls."""

    def __init__(self, gpu: FakeGpu, ncu: bool = False, pair_s: float = 0.0, **tools: Any) -> None:
        self.gpu = gpu
        self.pair_s = pair_s  # host time each A/A case takes besides its samples (compiling)
        self.suite = suite(gpu)
        self.device = Device("cpu", H200, can_autotune=True)
        self.probe = open_probe(H200.uuid, gpu.nvml())
        self.ncu_present = ncu
        self.clock = gpu.monotonic
        self.tools = Tools(
            timer=self.timer,
            probe=self.probe,
            do_bench=tools.get("do_bench", gpu.do_bench),
            torch_benchmark=tools.get("torch_benchmark", gpu.torch_benchmark),
            profile=tools.get("profile", gpu.profile),
            observe=gpu.observe,
            ceilings=CeilingLaunches(
                copy=lambda: gpu.kernel(2 * (1 << 30) / COPY_GBPS),
                copy_bytes=1 << 30,
                gemm=lambda: gpu.kernel(2 * 8192**3 / GEMM_TFLOPS / 1e3),
                gemm_size=8192,
            ),
            clock=gpu.monotonic,
            sleep=gpu.sleep,
        )

    def timer(self, name: str) -> CudaTimer:
        gpu = self.gpu
        l2 = COLD if name == EVENTS_TIMER else WARM
        return CudaTimer(l2, name == GRAPH_TIMER, H200.l2_bytes, gpu.max_mhz, gpu.torch,
                         gpu.perf_counter_ns)  # fmt: skip

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        emit = lambda name, data: events.append((name, finite(data)))  # noqa: E731
        run_measurements(self.suite, self.device, SOFTWARE, plan.options, self.tools, emit)
        return iter(events)

    def _tasks(self, request: CheckRequest, on_plan: Callable[[int], None]) -> Iterator[Any]:
        tasks = select_tasks(self.suite, request.kernels, request.workload, request.dtypes,
                             request.cases_per_kernel)  # fmt: skip
        on_plan(len(tasks))
        for task in tasks:
            if request.stop_at is not None and self.clock() >= request.stop_at:
                return
            yield task

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]:
        for t in self._tasks(request, on_plan):
            spec = self.suite.kernel(t.kernel)
            yield check_case(spec, "fake", t.workload, t.params, t.dtype, self.device, 0, SOFTWARE)

    def benches(
        self, request: BenchRequest, on_plan: Callable[[int], None]
    ) -> Iterator[Measurement]:
        """One A/A process: a session of its own, as a fresh child has."""
        session = BenchSession(self.device, request.options, SOFTWARE, self.timer(EVENTS_TIMER),
                               self.probe, self.gpu.monotonic, self.gpu.sleep)  # fmt: skip
        for t in self._tasks(request, on_plan):
            self.gpu.sleep(self.pair_s)
            spec = self.suite.kernel(t.kernel)
            yield session.measure(spec, "fake", t.workload, t.params, t.dtype, request.seed)

    def has_ncu(self) -> bool:
        return self.ncu_present

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]:
        """ncu's run of its own: the kernel's durations as the profiler reads them (0.2%
        apart), and what our events read inside that profiled run, which ncu's serialising
        and replaying of each launch inflates (the number the self-check once compared)."""
        model = memory_bound(3700.0)(plan.options.sol_case)
        rows = [f'"{i}","4242","python3","silu_and_mul_kernel","gpu__time_duration.sum",'
                f'"nsecond","{model * (1 + 0.002 * (i - 1)):.1f}"' for i in range(3)]  # fmt: skip
        csv = "\n".join([NCU_CSV.splitlines()[1], *rows])
        return {"available": True, "kernel": "silu_and_mul", "case": "n=64 size=1073741824",
                "ours_ns": 1.4 * model, "ncu_ns": parse_ncu_durations(csv)}  # fmt: skip

    def isolation(self) -> str:
        return "sandboxed: in-process simulation"


QUICK = BenchOptions(budget_s=0.01, min_time_s=0.001, warmup_s=0.002, cool_down_s=0.001,
                     timeout_s=0.05, baseline=False)  # fmt: skip
PLAN = SelfcheckPlan(
    options=SelfcheckOptions(
        bench=QUICK,
        sol_kernel="silu_and_mul",
        sol_case={"n": 64, "size": 1 << 30},
    ),
    aa_options=replace(QUICK, budget_s=0.02, min_samples=20),
)
NCU_CSV = """==PROF== Connected to process 4242
"ID","Process ID","Process Name","Kernel Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3","silu_and_mul_kernel","gpu__time_duration.sum","usecond","284.10"
"1","4242","python3","silu_and_mul_kernel","gpu__time_duration.sum","usecond","286.02"
"2","4242","python3","silu_and_mul_kernel","dram__bytes.sum","byte","1,234"
"""


def _run(backend: SimulatedBackend, tmp_path, plan: SelfcheckPlan = PLAN):
    return run_selfcheck_stages(plan, backend, tmp_path, date(2025, 1, 2))


def _statuses(outcome) -> dict[str, str]:
    return {f.key: f.status for f in outcome.findings}


def test_a_healthy_gpu_passes_every_question_and_the_report_has_every_part(tmp_path):
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)
    outcome = _run(SimulatedBackend(gpu, ncu=True), tmp_path)
    assert outcome.folder == tmp_path / "h200-2025-01-02"
    assert _statuses(outcome) == {key: trust.PASS for key, _ in trust.QUESTIONS}, [
        (f.key, f.line) for f in outcome.findings if f.status != trust.PASS
    ]
    assert outcome.settled
    assert {p.name for p in outcome.folder.iterdir()} == {"selfcheck.json", "summary.md"}
    report = json.loads((outcome.folder / "selfcheck.json").read_text())
    assert [f["question"] for f in report["findings"]] == [q for _, q in trust.QUESTIONS]
    assert report["device"]["name"] == "NVIDIA H200"
    assert set(report["stages"]) == {"sandbox", "measurements", "correctness", "aa", "ncu"}
    assert set(report["data"]) == {
        "device", "granularity", "ceilings", "sol", "flush", "agreement", "trace", "clocks",
        "correctness", "aa", "coverage", "ncu",
    }  # fmt: skip
    # The step's trace read as a serving trace: each kernel's function matched, launched
    # once a step; the trace itself is not kept.
    trace = report["data"]["trace"]
    assert "trace_gz" not in trace and trace["device"] == "NVIDIA H200"
    assert {r["kernel"] for r in trace["rows"]} == {k for k, *_ in EXPECTED_KERNELS}
    assert trace["functions"] == {
        f"{k}_kernel": {"expected": PLAN_STEPS, "found": PLAN_STEPS} for k, *_ in EXPECTED_KERNELS
    }
    assert trace["matched_share"] == pytest.approx(1.0) and trace["unmatched_share"] == 0
    summary = (outcome.folder / "summary.md").read_text()
    assert f"| rms_norm_kernel | rms_norm | {PLAN_STEPS} |" in summary
    assert summary.startswith("# kernelwatch GPU self-check: NVIDIA H200")
    for _, question in trust.QUESTIONS:
        assert f"| {question} | **PASS** |" in summary
    for heading in ("## Kernel times (us)", "## L2 flush", "## Ceilings", "## Traced decode step"):
        assert heading in summary
    flush = report["data"]["flush"]
    assert f"{100 * flush['difference']:+.1f}% from the dirty lines" in summary
    aa = report["data"]["aa"]
    # Two of each kernel's three cases, in two pairs of processes.
    assert aa["planned"] == len(aa["cases"]) == len(KERNELS) * 2 * 2
    assert all(c["same_config"] for c in aa["cases"])
    coverage = report["data"]["coverage"]["cases"]
    assert len(coverage) == len(KERNELS) * 2 and all(len(c["repeats"]) == 4 for c in coverage)
    assert report["data"]["granularity"]["smallest_step_ns"] == gpu.event_step_ns
    # ncu against the unprofiled %SOL median, not the inflated one of its own run.
    ncu = report["data"]["ncu"]
    assert ncu["ours_ns"] == report["data"]["sol"]["median_ns"]


#: The fake suite's kernels, as the traced step launches them, and the steps it traces.
EXPECTED_KERNELS = [(name,) for name in KERNELS]
PLAN_STEPS = TRACE_STEPS


def _traced(gpu: FakeGpu, tmp_path, **tools: Any) -> trust.Finding:
    outcome = _run(SimulatedBackend(gpu, **tools), tmp_path)
    return next(f for f in outcome.findings if f.key == "trace")


def test_a_cpu_only_trace_leaves_the_step_incomplete_and_the_run_goes_on(tmp_path):
    """On the CPU the profiler records no kernel events: the question says so, and every
    other question is judged as before."""
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)
    no_kernels = lambda step, steps: gpu.profile(step, steps, kernels=False)  # noqa: E731
    outcome = _run(SimulatedBackend(gpu, ncu=True, profile=no_kernels), tmp_path)
    statuses = _statuses(outcome)
    assert statuses.pop("trace") == trust.INCOMPLETE
    assert set(statuses.values()) == {trust.PASS}
    finding = next(f for f in outcome.findings if f.key == "trace")
    assert finding.line.startswith("the self-check's trace: a torch.profiler trace with no GPU "
                                   "kernel events (a CPU-only profile)")  # fmt: skip


def test_a_kernel_the_trace_misses_or_counts_twice_fails_the_step(tmp_path):
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)

    def dropping(step, steps):
        trace = json.loads(gpu.profile(step, steps))
        events = trace["traceEvents"]
        first = next(i for i, e in enumerate(events) if e["name"] == "softmax_kernel")
        del events[first]
        events.append({**events[-1], "ts": events[-1]["ts"] + 1})  # the last kernel twice
        return json.dumps(trace).encode()

    finding = _traced(gpu, tmp_path, profile=dropping)
    assert finding.status == trust.FAIL
    assert f"softmax_kernel: {PLAN_STEPS - 1} launches in the trace, {PLAN_STEPS} launched" in (
        finding.details
    )
    assert f"gemm_kernel: {PLAN_STEPS + 1} launches in the trace, {PLAN_STEPS} launched" in (
        finding.details
    )


def test_a_trace_that_is_not_one_fails_the_step_in_one_line(tmp_path):
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)
    finding = _traced(gpu, tmp_path, profile=lambda step, steps: b'{"traceEvents": [')
    assert finding.status == trust.FAIL
    assert finding.line.startswith("the measurement failed: the self-check's trace: not JSON")
    assert "\n" not in finding.line


def test_a_throttling_gpu_and_a_disagreeing_tool_fail_their_questions(tmp_path):
    """Clocks at 1300 of 1980 MHz (throttled), and a do_bench reading 20% high."""
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003, clock_override=lambda g: 1300.0)
    backend = SimulatedBackend(gpu, do_bench=lambda fn: 1.2 * gpu.do_bench(fn))
    outcome = _run(backend, tmp_path)
    statuses = _statuses(outcome)
    assert statuses["clocks"] == statuses["agreement"] == trust.FAIL
    assert statuses["ncu"] == trust.SKIPPED
    assert not outcome.settled
    clocks = next(f for f in outcome.findings if f.key == "clocks")
    assert "(100.0%) samples throttled" in clocks.line
    median = re.fullmatch(r"SM clock median (\d+) MHz of max 1980 MHz", clocks.details[0])
    assert median and int(median[1]) == pytest.approx(1300, rel=0.02)


def test_the_deadline_stops_a_stage_keeps_what_it_measured_and_says_so(tmp_path):
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)
    backend = SimulatedBackend(gpu, pair_s=20.0)  # each A/A case compiles for 20 s
    plan = replace(PLAN, deadline_s=200)
    outcome = _run(backend, tmp_path, plan)
    aa = json.loads((outcome.folder / "selfcheck.json").read_text())["data"]["aa"]
    assert 0 < len(aa["cases"]) < aa["planned"]
    finding = next(f for f in outcome.findings if f.key == "aa")
    assert finding.status == trust.INCOMPLETE and "deadline stopped the rest" in finding.line
    report = json.loads((outcome.folder / "selfcheck.json").read_text())
    assert report["stages"]["aa"].startswith("stopped at its deadline")
    assert report["seconds"] <= plan.deadline_s + 1


def test_a_measurement_that_fails_leaves_the_others(tmp_path):
    """One tool raising keeps the row's other numbers; a whole measurement raising is that
    question's failure, and the next measurement runs."""
    gpu = FakeGpu(warm_after_ns=1e6, jitter=0.003)

    def broken(fn):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    backend = SimulatedBackend(gpu, torch_benchmark=broken)
    plan = replace(PLAN, options=replace(PLAN.options, sol_case={"tokens": 16384}))
    outcome = _run(backend, tmp_path, plan)
    agreement = json.loads((outcome.folder / "selfcheck.json").read_text())["data"]["agreement"]
    row = agreement["rows"][0]
    assert row["ours"]["median_ns"] > 0 and row["do_bench_ns"] > 0
    assert row["torch_benchmark_ns"] is None
    assert row["errors"] == [
        "torch_benchmark_ns: RuntimeError: CUDA error: an illegal memory access was encountered"
    ]
    statuses = _statuses(outcome)
    assert statuses["agreement"] == statuses["sol"] == trust.FAIL
    sol = next(f for f in outcome.findings if f.key == "sol")
    assert sol.line == "the measurement failed: KeyError: 'n'"
    assert statuses["coverage"] == trust.PASS  # the A/A stage's, after both failures


@pytest.mark.parametrize(
    ("name", "slug"),
    [("NVIDIA H100 80GB HBM3", "h100-80gb-hbm3"), ("NVIDIA H200", "h200"), ("", "gpu")],
)
def test_gpu_slug(name, slug):
    assert gpu_slug(name) == slug


def test_ncu_durations_are_read_in_ns_from_its_csv():
    assert parse_ncu_durations(NCU_CSV) == [284_100.0, 286_020.0]
    assert parse_ncu_durations("==ERROR== ERR_NVGPUCTRPERM") == []


def _aa_stage(verdicts: list[str], planned: int | None = None) -> dict[str, Any]:
    row = {"kernel": "k", "status": "ok", "reason": "", "ratio": 1.0, "ci_low": 0.99,
           "ci_high": 1.01}  # fmt: skip
    cases = [{**row, "case": f"n={i}", "verdict": v} for i, v in enumerate(verdicts)]
    return {"planned": planned or len(cases), "cases": cases}


def _finding(key: str, data: dict[str, Any]) -> trust.Finding:
    return next(f for f in trust.judge(data) if f.key == key)


def test_the_a_a_rule_is_a_count_that_makes_sense_at_the_number_of_pairs_run():
    """At a 0.5% design rate one AMBIGUOUS in 30 pairs happens 14% of the time: a share rule
    failed it; the count fails only what the rate makes unlikely (p < 5%)."""
    one_in_30 = _finding("aa", {"aa": _aa_stage(["SAME"] * 29 + ["AMBIGUOUS"])})
    assert one_in_30.status == trust.PASS
    assert one_in_30.line.startswith("1 of 30 pairs other than SAME (0 SLOWER/FASTER)")
    assert "pass <= 1 of 30" in one_in_30.line
    two_in_30 = _finding("aa", {"aa": _aa_stage(["SAME"] * 28 + ["SLOWER", "AMBIGUOUS"])})
    assert two_in_30.status == trust.FAIL and "(1 SLOWER/FASTER)" in two_in_30.line
    assert _finding("aa", {"aa": _aa_stage(["SAME"] * 8 + ["FASTER"])}).status == trust.FAIL
    assert _finding("aa", {"aa": _aa_stage(["SAME"] * 197 + ["SLOWER"] * 3)}).status == (trust.PASS)
    assert _finding("aa", {"aa": _aa_stage(["SAME"] * 196 + ["SLOWER"] * 4)}).status == (trust.FAIL)


def _repeat(median: float, half: float) -> dict[str, float]:
    return {"median_ns": median, "ci_low_ns": median - half, "ci_high_ns": median + half}


def test_coverage_counts_cis_that_hold_the_other_repeats_median():
    wide = [_repeat(100.0 + d, 5.0) for d in (0, 1, -1, 2, -2, 0)]
    narrow = [_repeat(100.0 + d, 0.1) for d in (0, 1, -1, 2, -2, 3)]
    assert trust.coverage_counts([{"repeats": wide}])[:2] == (6, 6)
    held, total, _, _ = trust.coverage_counts([{"repeats": narrow}])
    assert total == 6 and held < 3
    stage = {"cases": [{"kernel": "k", "case": "n=1", "repeats": narrow}]}
    assert _finding("coverage", {"coverage": stage}).status == trust.FAIL


def test_sol_above_the_copy_ceiling_means_the_model_or_the_timing_is_wrong():
    stage = {"kernel": "silu_and_mul", "case": "tokens=16384", "gbps": 4000.0,
             "copy_gbps": 4300.0, "datasheet_gbps": 4800.0}  # fmt: skip
    assert _finding("sol", {"sol": stage}).status == trust.PASS
    assert _finding("sol", {"sol": {**stage, "gbps": 4700.0}}).status == trust.FAIL
    assert _finding("sol", {"sol": {**stage, "copy_gbps": None}}).status == trust.INCOMPLETE


def test_a_statistic_narrower_than_the_event_step_fails_granularity():
    summary = {"median_ns": 2000.0, "rel_ci_halfwidth": 0.0, "stop": "converged"}
    stage = {"kernel": "k", "case": "n=1", "samples": 200, "distinct": 2,
             "smallest_step_ns": 500.0, "quantum_ns": 500.0, "summary": summary}  # fmt: skip
    assert _finding("granularity", {"granularity": stage}).status == trust.FAIL
    widened = {**summary, "rel_ci_halfwidth": 0.125, "stop": "resolution"}
    assert _finding("granularity", {"granularity": {**stage, "summary": widened}}).status == (
        trust.PASS
    )


def test_missing_stages_are_incomplete_and_a_failed_one_says_why():
    findings = trust.judge({"clocks": {"error": "NVMLError: driver not loaded"}})
    statuses = {f.key: f.status for f in findings}
    assert statuses["clocks"] == trust.FAIL and statuses["aa"] == trust.INCOMPLETE
    assert next(f for f in findings if f.key == "clocks").line == (
        "the measurement failed: NVMLError: driver not loaded"
    )
