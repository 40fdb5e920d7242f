"""The GPU self-check: whether this harness's timing can be trusted on this GPU, settled in one
run under a hard deadline (``kernelwatch selfcheck``; ``docs/TIMING.md``).

Four stages, each in fresh child processes (kernel code never runs here):

1. ``measurements`` (one runner child, ``harness/timing/selfcheck.py``): the device and its
   clock setup, event granularity, the ceilings, %SOL of a large memory-bound case,
   agreement with ``do_bench`` and ``torch.utils.benchmark``, CI coverage over repeats,
   clocks and throttling over every sample taken.
2. ``correctness``: every kernel's smoke cases in bf16 (the CPU cannot vouch for bf16),
   CUDA C++ kernels included.
3. ``aa``: every case of the workload A/B'd against itself through the real A/B path
   (``supervise.run_ab`` in a fresh child, its own autotuning) and ``analysis/verdict``.
4. ``ncu``: when Nsight Compute is on the host, one kernel's ``gpu__time_duration`` against
   our median.

Each stage may run until its share of the deadline (what the later stages reserve is kept
for them); a stage that overruns is stopped and keeps what it measured. After every stage,
and after every record of the long ones, the folder ``<out>/<gpu>-<date>/`` gets each stage's
JSON, ``selfcheck.json`` (every question's finding) and ``summary.md``, so a run cut short
still leaves its report. The :class:`Backend` runs the stages: child processes here, an
in-process simulated GPU in the tests.

What the harness measures it does not judge: the A/A verdicts, the findings and the summary
come from the caller as a :class:`Judging` (``analysis/trust.py`` and
``report/trust_summary.py``, which the harness may not import; ``cli/selfcheck.py`` passes
them).
"""

from __future__ import annotations

import csv
import json
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from kernelwatch.harness.records import ABMeasurement, CorrectnessResult, Measurement
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.harness.supervise import (
    ABRequest,
    CheckRequest,
    SelfcheckRequest,
    SuiteError,
    run_ab,
    run_checks,
    run_selfcheck,
)
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions

#: The stages in order, with their shares of the deadline (guesses for one H200 at the
#: 285 s default, as seconds: the measurements ~60 s, the bf16 smoke check ~40 s with
#: compilation, the A/A pass over the llm workload the most, ncu ~30 s). A stage may run
#: until the end of its share counted from the start; one that finishes early leaves its
#: time to the next.
STAGES: tuple[tuple[str, float], ...] = (
    ("measurements", 75.0),
    ("correctness", 45.0),
    ("aa", 100.0),
    ("ncu", 35.0),
)
#: A stage with less than this left is not started.
MIN_STAGE_S = 10.0
#: Kernel launches ncu profiles.
NCU_LAUNCHES = 20


@dataclass(frozen=True)
class SelfcheckPlan:
    """What one self-check runs. ``options``: the device measurements (their kernels,
    workload and dtype select the A/A cases too); ``check_workload``: the correctness
    cases; ``cuda_kernels``: the suite's CUDA C++ kernels, whose launch must pass;
    ``ab_options``: the A/A sampling; ``ncu_kernel``: the GPU function name of the %SOL
    case's kernel, for ncu's filter; ``deadline_s``: the hard limit for everything."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    options: SelfcheckOptions = field(
        default_factory=lambda: SelfcheckOptions(
            bench=BenchOptions(budget_s=0.5, warmup_s=0.1, cool_down_s=0.1, baseline=False)
        )
    )
    check_workload: str = "smoke"
    cuda_kernels: tuple[str, ...] = ("silu_and_mul_cuda",)
    ab_options: BenchOptions = field(
        default_factory=lambda: BenchOptions(
            budget_s=0.25, min_time_s=0.02, warmup_s=0.05, cool_down_s=0.02, timeout_s=5.0
        )
    )
    ncu_kernel: str = "silu_and_mul_kernel"
    deadline_s: float = 285.0
    case_timeout_s: float = 60.0


class Backend(Protocol):
    """Runs the stages (``stop_at`` is on the backend's ``clock``)."""

    clock: Callable[[], float]

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]: ...

    def pairs(
        self, request: ABRequest, on_plan: Callable[[int], None]
    ) -> Iterator[ABMeasurement]: ...

    def has_ncu(self) -> bool: ...

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]: ...


class ChildBackend:
    """The stages in child processes on this machine's device."""

    clock = staticmethod(time.monotonic)

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        return run_selfcheck(SelfcheckRequest(plan.suite, plan.options, stop_at), progress)

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]:
        return run_checks(request, on_plan)

    def pairs(self, request: ABRequest, on_plan: Callable[[int], None]) -> Iterator[ABMeasurement]:
        return run_ab(request, on_plan)

    def has_ncu(self) -> bool:
        return shutil.which("ncu") is not None

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]:
        """The %SOL case timed by us inside ``ncu``, which profiles its first launches with
        caches flushed and clocks left alone (as ours run)."""
        ncu = shutil.which("ncu")
        assert ncu is not None
        with tempfile.TemporaryDirectory(prefix="kernelwatch-ncu-") as tmp:
            log = Path(tmp) / "ncu.csv"
            wrapper = (
                ncu, "--csv", "--log-file", str(log), "--metrics", "gpu__time_duration.sum",
                "--cache-control", "all", "--clock-control", "none", "--target-processes",
                "all", "--kernel-name", f"regex:{plan.ncu_kernel}", "--launch-count",
                str(NCU_LAUNCHES),
            )  # fmt: skip
            options = replace(plan.options, steps=("sol",))
            request = SelfcheckRequest(plan.suite, options, stop_at, wrapper)
            sol = dict(run_selfcheck(request, lambda message: None)).get("sol") or {}
            text = log.read_text(errors="replace") if log.exists() else ""
        durations = parse_ncu_durations(text)
        return {
            "available": True,
            "kernel": sol.get("kernel"),
            "case": sol.get("case"),
            "ours_ns": sol.get("median_ns"),
            "ncu_ns": durations,
            "note": "" if durations else (text.strip().splitlines() or ["no ncu output"])[-1],
        }


#: A finding (a dataclass: ``selfcheck.json`` keeps it as ``asdict`` writes it).
F = TypeVar("F")


@dataclass(frozen=True)
class Judging(Generic[F]):
    """The self-check's decisions, passed in by the caller. ``pair``: an A/A case's verdict
    fields as ``aa.json`` keeps them, from its two measurements; ``findings``: every
    question's finding from the stages' data so far; ``summary``: ``summary.md`` from the
    findings, the data, each stage's line, the seconds taken and the deadline;
    ``settled``: whether the findings let the self-check exit 0."""

    pair: Callable[[Measurement, Measurement], dict[str, Any]]
    findings: Callable[[Mapping[str, Any]], list[F]]
    summary: Callable[[list[F], Mapping[str, Any], Mapping[str, str], float, float], str]
    settled: Callable[[list[F]], bool]


_UNITS_NS = {"nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9}


def parse_ncu_durations(text: str) -> list[float]:
    """Every ``gpu__time_duration.sum`` in ncu's CSV output, in ns (lines before the CSV
    header, ncu's own ``==PROF==`` messages, are skipped)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        return []
    durations = []
    for row in csv.DictReader(lines[start:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = _UNITS_NS.get((row.get("Metric Unit") or "").strip())
        value = (row.get("Metric Value") or "").replace(",", "").strip()
        if unit is not None and re.fullmatch(r"[0-9.]+", value):
            durations.append(float(value) * unit)
    return durations


class _Report(Generic[F]):
    """The report folder, rewritten after every step: each stage's JSON, the findings, and
    the markdown summary."""

    def __init__(self, out_root: Path, day: date, plan: SelfcheckPlan, judging: Judging[F]) -> None:
        self.out_root, self.day, self.plan, self.judging = out_root, day, plan, judging
        self.data: dict[str, dict[str, Any]] = {}
        self.stages: dict[str, str] = {}
        self.folder: Path | None = None
        self.seconds = 0.0

    def update(self, stage: str, data: dict[str, Any], seconds: float) -> None:
        self.data[stage] = data
        self.seconds = seconds
        self.write(stage)

    def write(self, stage: str | None = None) -> list[F]:
        folder = self._folder()
        if stage is not None:
            _write_json(folder / f"{stage}.json", self.data[stage])
        findings = self.judging.findings(self.data)
        _write_json(
            folder / "selfcheck.json",
            {
                "device": (self.data.get("device") or {}).get("device"),
                "seconds": round(self.seconds, 1),
                "deadline_s": self.plan.deadline_s,
                "stages": self.stages,
                "findings": [asdict(f) for f in findings],
            },
        )
        summary = self.judging.summary(
            findings, self.data, self.stages, self.seconds, self.plan.deadline_s
        )
        (folder / "summary.md").write_text(summary)
        return findings

    def _folder(self) -> Path:
        if self.folder is None:
            name = (self.data.get("device") or {}).get("device", {}).get("name") or "unknown-gpu"
            base = self.out_root / f"{gpu_slug(name)}-{self.day.isoformat()}"
            folder, n = base, 1
            while folder.exists():
                n += 1
                folder = base.with_name(f"{base.name}-{n}")
            folder.mkdir(parents=True)
            self.folder = folder
        return self.folder


def gpu_slug(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``."""
    words = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-").split("-")
    return "-".join(w for w in words if w != "nvidia") or "gpu"


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n")
    tmp.replace(path)


@dataclass(frozen=True)
class Outcome(Generic[F]):
    """Where the report is, what it found, and whether that settles the timing here."""

    folder: Path
    findings: list[F]
    settled: bool


def run_stages(
    plan: SelfcheckPlan,
    backend: Backend,
    judging: Judging[F],
    out_root: Path,
    day: date,
    progress: Callable[[str], None] = lambda message: None,
) -> Outcome[F]:
    """Run every stage within ``plan.deadline_s`` and keep the report current as they go; a
    stage whose child dies is reported and the next one runs. Raises the supervisor's
    SelectionUnavailable for kernels or workloads the suite lacks."""
    report = _Report(out_root, day, plan, judging)
    run = _Run(plan, backend, report, backend.clock(), progress)
    stages = [(name, s) for name, s in STAGES if name != "ncu" or backend.has_ncu()]
    scale = plan.deadline_s / sum(share for _, share in stages)
    for index, (stage, _) in enumerate(stages):
        stop_at = run.start + scale * sum(share for _, share in stages[: index + 1])
        if stop_at - backend.clock() < MIN_STAGE_S:
            run.report.stages[stage] = "not run: out of time"
            continue
        progress(stage)
        began = backend.clock()
        try:
            _STAGE_RUNNERS[stage](run, stop_at)
            ended = "stopped at its deadline" if backend.clock() >= stop_at else "done"
        except SuiteError as exc:  # this stage's child died: the other stages still run
            ended = f"failed: {exc}"
        run.report.stages[stage] = f"{ended} in {backend.clock() - began:.0f} s"
        run.report.seconds = backend.clock() - run.start
        run.report.write()
    if not backend.has_ncu():
        run.report.stages["ncu"] = "skipped: ncu is not on this host"
        run.save("ncu", {"available": False})
    run.report.seconds = backend.clock() - run.start
    findings = run.report.write()
    assert run.report.folder is not None
    return Outcome(run.report.folder, findings, judging.settled(findings))


@dataclass(frozen=True)
class _Run:
    """One self-check in progress."""

    plan: SelfcheckPlan
    backend: Backend
    report: _Report[Any]
    start: float
    progress: Callable[[str], None]

    def save(self, stage: str, data: dict[str, Any]) -> None:
        self.report.update(stage, data, self.backend.clock() - self.start)

    def records(
        self,
        stage: str,
        records: Callable[[Callable[[int], None]], Iterator[Any]],
        row: Callable[[Any], dict[str, Any]],
        **fields: Any,
    ) -> None:
        """Save the stage after every record ``records(on_plan)`` yields, as ``row`` keeps it,
        with the number of cases the child planned."""
        cases: list[dict[str, Any]] = []
        data: dict[str, Any] = {"planned": 0, **fields, "cases": cases}

        def planned(count: int) -> None:
            data["planned"] = count

        for record in records(planned):
            cases.append(row(record))
            self.save(stage, data)
        self.save(stage, data)


def _measurements(run: _Run, stop_at: float) -> None:
    for name, data in run.backend.measurements(run.plan, stop_at, run.progress):
        run.save(name, data)


def _selection(plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]:
    """What the correctness and A/A requests share: suite, kernels, dtype, timeouts."""
    return {
        "suite": plan.suite,
        "kernels": plan.options.kernels,
        "dtypes": (plan.options.dtype,),
        "case_timeout_s": plan.case_timeout_s,
        "stop_at": stop_at,
    }


def _correctness(run: _Run, stop_at: float) -> None:
    plan, options = run.plan, run.plan.options
    request = CheckRequest(workload=plan.check_workload, **_selection(plan, stop_at))
    run.records(
        "correctness",
        lambda planned: run.backend.checks(request, planned),
        _check,
        dtype=options.dtype,
        cuda_kernels=list(plan.cuda_kernels),
    )


def _check(record: CorrectnessResult) -> dict[str, Any]:
    return {
        "kernel": record.case.kernel,
        "case": record.case.label(),
        "dtype": record.case.dtype,
        "verdict": record.verdict,
        "reason": record.reason,
        "rel_error": record.rel_error,
        "config": record.config.label() if record.config else None,
    }


def _aa(run: _Run, stop_at: float) -> None:
    plan = run.plan
    request = ABRequest(
        suite_b=plan.suite,
        workload=plan.options.workload,
        options=plan.ab_options,
        **_selection(plan, stop_at),
    )
    pair = run.report.judging.pair
    run.records("aa", lambda planned: run.backend.pairs(request, planned), lambda r: _pair(r, pair))


def _pair(
    record: ABMeasurement, verdict: Callable[[Measurement, Measurement], dict[str, Any]]
) -> dict[str, Any]:
    """One A/A case as the report keeps it: the verdict and its numbers, not the samples."""
    row: dict[str, Any] = {
        "kernel": record.case.kernel,
        "case": record.case.label(),
        "status": record.status,
        "reason": record.reason,
        "verdict": None,
    }
    if record.status == "ok" and record.base is not None and record.head is not None:
        row.update(verdict(record.base, record.head))
    return row


def _ncu(run: _Run, stop_at: float) -> None:
    run.save("ncu", run.backend.ncu(run.plan, stop_at))


_STAGE_RUNNERS: dict[str, Callable[[_Run, float], None]] = {
    "measurements": _measurements,
    "correctness": _correctness,
    "aa": _aa,
    "ncu": _ncu,
}
