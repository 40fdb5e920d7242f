"""The self-check's scheduler and report folder (``harness/selfcheck/stages.py``) on their own:
a scripted backend on a manual clock, whose stages take the seconds they are given whatever
their deadline, and a recording judging in place of ``analysis/trust.py``'s.
``test_selfcheck.py`` runs the same scheduler end to end on a simulated GPU."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from factories import CASE, correctness, measurement

from kernelwatch.harness.isolation.supervise import BenchRequest, CheckRequest, SuiteError
from kernelwatch.harness.records import CorrectnessResult, Measurement
from kernelwatch.harness.selfcheck.stages import (
    MIN_STAGE_S,
    STAGES,
    Judging,
    Outcome,
    SelfcheckPlan,
    parse_ncu_durations,
    run_stages,
)

START = 1000.0
DAY = date(2025, 1, 2)
SHARES = sum(share for _, share in STAGES)


@dataclass
class ScriptedBackend:
    """Each stage takes ``took[stage]`` seconds (1 s unless told) and records the deadline it
    was given; a stage in ``dies`` raises the supervisor's SuiteError."""

    took: dict[str, float] = field(default_factory=dict)
    dies: tuple[str, ...] = ()
    ncu_present: bool = True
    device_name: str = "NVIDIA H200"
    now: float = START
    stop_at: dict[str, float] = field(default_factory=dict)

    def clock(self) -> float:
        return self.now

    processes: list[BenchRequest] = field(default_factory=list)
    checked: list[CheckRequest] = field(default_factory=list)

    def _spend(self, stage: str, stop_at: float | None, parts: int = 1) -> None:
        """Spend a ``parts``-th of the stage's time (its A/A processes share it)."""
        assert stop_at is not None
        self.stop_at[stage] = stop_at
        if stage in self.dies:
            raise SuiteError(f"the {stage} runner was killed by signal 9: out of memory")
        self.now += self.took.get(stage, 1.0) / parts

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        self._spend("measurements", stop_at)
        yield "device", {"device": {"name": self.device_name}}

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]:
        """The bf16 check (pinned configs), or the A/A stage's own check of its cases, which
        autotunes them and passes both."""
        self.checked.append(request)
        on_plan(3)
        if not request.autotune:
            self._spend("correctness", request.stop_at)
            yield correctness()
            return
        yield correctness()
        yield correctness(replace(CASE, params={"rows": 1, "hidden": 8}))

    def benches(
        self, request: BenchRequest, on_plan: Callable[[int], None]
    ) -> Iterator[Measurement]:
        """Process n times the first case at 1000 ns times 1.1^(n-1); the second case raises
        in process 2."""
        self.processes.append(request)
        on_plan(2)
        self._spend("aa", request.stop_at, parts=4)
        scale = 1.1 ** (request.seed - 1)
        yield measurement(samples_ns=tuple(scale * t for t in (1000.0, 1010.0, 990.0)))
        other = replace(CASE, params={"rows": 1, "hidden": 8})
        if request.seed == 2:
            yield measurement(other, (), status="error", reason="the B side raised")
        else:
            yield measurement(other)

    def isolation(self) -> str:
        return "sandboxed: children run as user kernelwatch-sandbox"

    def has_ncu(self) -> bool:
        return self.ncu_present

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]:
        self._spend("ncu", stop_at)
        return {"available": True, "ncu_ns": [284_100.0]}


@dataclass(frozen=True)
class Found:
    """A finding as the recording judging makes it: how many stages had data."""

    stages: int
    status: str


@dataclass
class Recorder:
    """A judging that records what the scheduler handed it."""

    settle: bool = True
    summaries: list[tuple[dict[str, str], float, float]] = field(default_factory=list)

    def pair(self, base: Measurement, head: Measurement) -> dict[str, Any]:
        assert base.summary is not None and head.summary is not None
        return {"verdict": "SLOWER", "ratio": head.summary.median_ns / base.summary.median_ns}

    def findings(self, data: Mapping[str, Any]) -> list[Found]:
        return [Found(len(data), "pass")]

    def summary(
        self,
        findings: list[Found],
        data: Mapping[str, Any],
        stages: Mapping[str, str],
        seconds: float,
        deadline_s: float,
    ) -> str:
        self.summaries.append((dict(stages), seconds, deadline_s))
        return f"{findings[0].stages} stages judged\n"

    def judging(self) -> Judging[Found]:
        return Judging(self.pair, self.findings, self.summary, lambda found: self.settle, dict)


def _run(
    backend: ScriptedBackend,
    tmp_path: Path,
    deadline_s: float = SHARES,
    recorder: Recorder | None = None,
    progress: Callable[[str], None] = lambda message: None,
) -> Outcome[Found]:
    plan = SelfcheckPlan(deadline_s=deadline_s)
    judging = (recorder or Recorder()).judging()
    return run_stages(plan, backend, judging, tmp_path, DAY, progress)


def _report(outcome: Outcome[Found]) -> dict[str, Any]:
    return json.loads((outcome.folder / "selfcheck.json").read_text())


def test_each_stage_may_run_until_its_share_of_the_deadline_counted_from_the_start(tmp_path):
    backend = ScriptedBackend()
    messages: list[str] = []
    outcome = _run(backend, tmp_path, deadline_s=2 * SHARES, progress=messages.append)
    assert messages == ["measurements", "correctness", "aa", "ncu"]
    shares = dict(STAGES)
    assert backend.stop_at == {
        "measurements": START + 2 * shares["measurements"],
        "correctness": START + 2 * (shares["measurements"] + shares["correctness"]),
        "aa": START + 2 * (SHARES - shares["ncu"]),
        "ncu": START + 2 * SHARES,
    }
    report = _report(outcome)
    assert report["stages"] == {
        "sandbox": "sandboxed: children run as user kernelwatch-sandbox",
        **dict.fromkeys(backend.stop_at, "done in 1 s"),
    }
    assert report["seconds"] == 4.0 and report["deadline_s"] == 2 * SHARES
    # Issue 49: the device seconds the self-check held, whole and by stage.
    assert report["device_time"] == {
        "stage": "selfcheck", "device_s": 4.0, "cases": 0,
        "by_stage": dict.fromkeys(backend.stop_at, 1.0),
    }  # fmt: skip


def test_the_correctness_stage_checks_bf16_and_the_fp4_gemm_in_mxfp4(tmp_path):
    """Issue 50: the FP4 GEMM has no bf16 form, so a bf16-only correctness stage left it out
    of the self-check; it is checked in its own dtype (the emulated path where the GPU has no
    FP4 tensor cores)."""
    backend = ScriptedBackend()
    _run(backend, tmp_path, deadline_s=2 * SHARES)
    (pinned,) = [r for r in backend.checked if not r.autotune]
    assert pinned.dtypes == ("bf16", "mxfp4") and pinned.workload == "smoke"


def test_without_ncu_its_share_goes_to_the_other_stages_and_the_report_says_it_was_skipped(
    tmp_path,
):
    backend = ScriptedBackend(ncu_present=False)
    outcome = _run(backend, tmp_path, deadline_s=100.0)
    assert set(backend.stop_at) == {"measurements", "correctness", "aa"}
    assert backend.stop_at["aa"] == START + 100.0
    report = _report(outcome)
    assert report["stages"]["ncu"] == "skipped: ncu is not on this host"
    assert report["data"]["ncu"] == {"available": False}


def test_a_stage_that_overruns_is_reported_stopped_and_one_left_too_little_time_is_not_run(
    tmp_path,
):
    shares = dict(STAGES)
    # The measurements run past the correctness stage's end, less than MIN_STAGE_S before it.
    took = shares["measurements"] + shares["correctness"] - MIN_STAGE_S / 2
    backend = ScriptedBackend(took={"measurements": took})
    outcome = _run(backend, tmp_path)
    stages = _report(outcome)["stages"]
    assert stages["measurements"] == f"stopped at its deadline in {took:.0f} s"
    assert stages["correctness"] == "not run: out of time"
    assert "correctness" not in backend.stop_at
    assert "correctness" not in _report(outcome)["data"]
    assert stages["aa"] == stages["ncu"] == "done in 1 s"


def test_a_stage_whose_child_dies_is_reported_and_the_next_stages_still_run(tmp_path):
    outcome = _run(ScriptedBackend(dies=("correctness",)), tmp_path)
    stages = _report(outcome)["stages"]
    assert stages["correctness"] == (
        "failed: the correctness runner was killed by signal 9: out of memory in 0 s"
    )
    assert stages["aa"] == stages["ncu"] == "done in 1 s"
    assert _report(outcome)["data"]["aa"]["cases"]


def test_the_report_folder_holds_each_stage_and_what_the_judging_made_of_them(tmp_path):
    recorder = Recorder(settle=False)
    outcome = _run(ScriptedBackend(), tmp_path, recorder=recorder)
    assert outcome.folder == tmp_path / "h200-2025-01-02"
    assert outcome.findings == [Found(5, "pass")] and not outcome.settled
    # Two files whatever the stages: the device tool returns eight.
    assert {p.name for p in outcome.folder.iterdir()} == {"selfcheck.json", "summary.md"}
    report = _report(outcome)
    assert report["device"] == {"name": "NVIDIA H200"}
    assert report["findings"] == [{"stages": 5, "status": "pass"}]
    assert (outcome.folder / "summary.md").read_text() == "5 stages judged\n"
    assert recorder.summaries[-1] == (report["stages"], 4.0, SHARES)
    aa = report["data"]["aa"]
    assert aa["planned"] == 4 and aa["processes"] == 4 and aa["seeds"] == [1, 2, 3, 4]
    first, second, error, other = aa["cases"]
    # Processes 1 and 2 are a pair, 3 and 4 another: each ratio is 1.1.
    assert first["verdict"] == second["verdict"] == "SLOWER"
    assert first["ratio"] == second["ratio"] == pytest.approx(1.1)
    assert error == {"kernel": "rms_norm", "case": "rows=1 hidden=8", "status": "error",
                     "reason": "the B side raised", "verdict": None}  # fmt: skip
    assert other["status"] == "ok"
    coverage = report["data"]["coverage"]["cases"]
    medians = [r["median_ns"] for r in coverage[0]["repeats"]]
    assert medians == pytest.approx([1000.0 * 1.1**i for i in range(4)])
    assert coverage[1]["repeats"][1] is None
    checks = report["data"]["correctness"]
    assert checks["planned"] == 3 and checks["cases"][0]["verdict"] == "pass"


def test_every_a_a_process_draws_its_own_inputs_and_launches_the_configs_a_check_chose(
    tmp_path,
):
    """As a PR's A/B does (its check's configs pinned on both sides): the H200 self-check of
    2026-12-04 let the first of its processes autotune and pinned the others to its choice,
    and that first process read 2-6% faster than the three others on every few-microsecond
    kernel, so each first pair was SLOWER while the second was within 1%."""
    backend = ScriptedBackend()
    _run(backend, tmp_path)
    bf16, chooser = backend.checked
    # The bf16 check launches the pinned configs: no autotuning at smoke shapes.
    assert bf16.autotune is False
    assert chooser.autotune is True and chooser.workload == SelfcheckPlan().options.workload
    assert chooser.cases_per_kernel == SelfcheckPlan().aa_cases_per_kernel
    assert [p.seed for p in backend.processes] == [1, 2, 3, 4]
    chosen = correctness().config
    for process in backend.processes:
        assert process.options.pin_source == "checked"
        assert process.options.pins["rms_norm"] == {"rows=1 hidden=8 / fp16": chosen,
                                                    f"{CASE.label()} / fp16": chosen}  # fmt: skip
        assert process.cases_per_kernel == SelfcheckPlan().aa_cases_per_kernel


def test_the_a_a_check_gets_two_shares_of_the_stage_and_each_process_one(tmp_path):
    backend = ScriptedBackend(took={"aa": 0.0})
    _run(backend, tmp_path, deadline_s=SHARES)
    shares = dict(STAGES)
    begin = START + 2.0  # measurements and correctness took a second each
    window = START + SHARES - shares["ncu"] - begin
    assert backend.checked[1].stop_at == pytest.approx(begin + window * 2 / 6)
    stops = [p.stop_at for p in backend.processes]
    # The check took no time here: what it left goes to the processes, a quarter each.
    assert stops[0] == pytest.approx(begin + window / 4)
    assert stops[-1] == pytest.approx(START + SHARES - shares["ncu"])


def test_an_odd_number_of_a_a_processes_is_refused():
    with pytest.raises(ValueError, match="even number"):
        SelfcheckPlan(aa_processes=3)


def test_a_second_run_on_the_same_day_gets_its_own_folder_and_a_nameless_device_a_generic_one(
    tmp_path,
):
    first = _run(ScriptedBackend(), tmp_path)
    second = _run(ScriptedBackend(), tmp_path)
    assert second.folder == first.folder.with_name("h200-2025-01-02-2")
    assert _run(ScriptedBackend(device_name=""), tmp_path).folder.name == "unknown-gpu-2025-01-02"


def test_ncu_durations_in_every_unit_and_rows_without_a_number_are_left_out():
    header = '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
    rows = [
        '"0","k","gpu__time_duration.sum","msecond","1.5"',
        '"1","k","gpu__time_duration.sum","nsecond","1,250"',
        '"2","k","gpu__time_duration.sum","second","0.000002"',
        '"3","k","gpu__time_duration.sum","usecond","n/a"',
        '"4","k","gpu__time_duration.sum","cycle","900"',
    ]
    text = "\n".join(["==PROF== Disconnected from process 1", header, *rows])
    assert parse_ncu_durations(text) == pytest.approx([1_500_000.0, 1_250.0, 2_000.0])
    # What ncu wrote on the H200 (2026-12-04): short units, a thousands separator.
    h200 = [
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
        '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
        '"Metric Value"',
        '"19","26","python3.12","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)",'
        '"(16384, 28, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum",'
        '"ns","666,272"',
        '"20","26","python3.12","127.0.0.1","silu_and_mul_kernel","1","13","(128, 1, 1)",'
        '"(16384, 28, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum",'
        '"us","665.90"',
    ]
    assert parse_ncu_durations("\n".join(h200)) == pytest.approx([666_272.0, 665_900.0])
    assert parse_ncu_durations("") == []


BUDGET = Path(__file__).resolve().parent.parent / "docs" / "results" / "selfcheck_budget.json"
SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu-selfcheck.sh"


def test_every_stage_fits_its_share_and_the_whole_fits_eight_minutes_by_the_budget_table():
    """The shares are set from docs/TIMING.md's budget table (scripts/selfcheck_budget.py):
    each stage's estimate inside its share at the default deadline, the deadline inside the
    script's hard limit, and the limit inside 8 minutes, so a rerun fits a 15-minute lease."""
    budget = json.loads(BUDGET.read_text())
    plan = SelfcheckPlan()
    limit = int(re.search(r"^limit=(\d+)$", SCRIPT.read_text(), re.MULTILINE)[1])
    assert budget["deadline_s"] == plan.deadline_s and budget["script_limit_s"] == limit
    assert limit <= 8 * 60 and plan.deadline_s <= limit - 20
    shares = dict(STAGES)
    scale = plan.deadline_s / SHARES
    assert [row["stage"] for row in budget["stages"]] == list(shares)
    for row in budget["stages"]:
        assert row["share_s"] == pytest.approx(shares[row["stage"]] * scale, abs=0.1)
        assert row["total_s"] <= row["share_s"], row
    assert budget["total_s"] <= plan.deadline_s
