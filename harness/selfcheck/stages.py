"""The GPU self-check: whether this harness's timing can be trusted on this GPU, settled in one
run under a hard deadline (``kernelwatch selfcheck``; ``docs/TIMING.md``).

Four stages, each in fresh child processes (kernel code never runs here), all in one
sandbox (``held_sandbox``: the built-in suite is trusted, so its children share Triton's
cache and compile each kernel once):

1. ``measurements`` (one kernel child, ``harness/selfcheck/measure.py``): the device and its
   clock setup, event granularity, the ceilings, %SOL of a large memory-bound case, the two
   L2 flushes, agreement with ``do_bench`` and ``torch.utils.benchmark``, a decode step
   traced with ``torch.profiler`` (read here by ``Judging.trace``, the serving-trace
   reader), clocks and throttling over every sample taken.
2. ``correctness``: every kernel's smoke cases in bf16 (the CPU cannot vouch for bf16),
   CUDA C++ and CuTe DSL kernels included (the latter where ``nvidia-cutlass-dsl`` is
   installed: the stage records its version, or "absent"), and the FP4 GEMM's in mxfp4 (it
   has no bf16 form; on a GPU without FP4 tensor cores it checks the emulated path the
   build reports).
3. ``aa``: a few cases of every kernel at the workload's shapes, timed by
   ``aa_processes`` independent children one after another, each with inputs drawn from
   its own seed (the first autotunes; the others launch the configs it chose). Processes
   1 and 2, 3 and 4, ... are the A/A pairs, judged by ``analysis/verdict``; every process's
   median and CI of a case are the CI-coverage repeats. Process-to-process noise is in
   both, as it is between a PR's base and head.
4. ``ncu``: when Nsight Compute is on the host, the %SOL case launched in a run of its own
   under ``ncu``; its ``gpu__time_duration`` against the median the unprofiled
   measurements stage took.

Each stage may run until its share of the deadline (what the later stages reserve is kept
for them); a stage that overruns is stopped and keeps what it measured. After every stage,
and after every record of the long ones, the folder ``<out>/<gpu>-<date>/`` gets two files:
``selfcheck.json`` (every question's finding, each stage's line and data) and
``summary.md``, so a run cut short still leaves its report, and the device tool's eight
returned files hold all of it. The :class:`Backend` runs the stages: child processes here,
an in-process simulated GPU in the tests.

What the harness measures it does not judge: the A/A verdicts, the findings and the summary
come from the caller as a :class:`Judging` (``analysis/trust.py`` and
``report/trust_summary.py``, which the harness may not import; ``cli/selfcheck.py`` passes
them).
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import date
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from kernelwatch.harness.build.cute_build import dsl_version
from kernelwatch.harness.build.sass import FP4_DTYPES
from kernelwatch.harness.isolation.sandbox import Sandbox, held_sandbox
from kernelwatch.harness.isolation.supervise import (
    BenchRequest,
    CheckRequest,
    SelfcheckRequest,
    SuiteError,
    run_benches,
    run_checks,
    run_selfcheck,
)
from kernelwatch.harness.records import CorrectnessResult, Measurement, StageTime
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef
from kernelwatch.harness.timing.pinning import pins_from_records
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions

#: The stages in order, with their shares of the deadline in seconds at the ~450 s the
#: script leaves (docs/TIMING.md's budget table: what each stage compiles, autotunes and
#: samples on one H200). A stage may run until the end of its share counted from the
#: start; one that finishes early leaves its time to the next.
STAGES: tuple[tuple[str, float], ...] = (
    ("measurements", 150.0),
    ("correctness", 50.0),
    ("aa", 200.0),
    ("ncu", 50.0),
)
#: A stage with less than this left is not started.
MIN_STAGE_S = 10.0
#: Kernel launches ncu profiles.
NCU_LAUNCHES = 20
#: The A/A stage's check autotunes and compiles its cases: it gets this many shares of the
#: stage's time to each measuring process's one.
CHECK_SHARES = 2.0


@dataclass(frozen=True)
class SelfcheckPlan:
    """What one self-check runs. ``options``: the device measurements (their kernels,
    workload and dtype select the A/A cases too); ``check_workload``: the correctness
    cases; ``cuda_kernels``: the suite's CUDA C++ kernels, whose launch must pass;
    ``cute_kernels``: its CuTe DSL kernels, whose launch must pass where the optional
    ``nvidia-cutlass-dsl`` is installed (without it they are said not to have run);
    ``aa_options``: the A/A sampling, in each of ``aa_processes`` processes (an even number:
    they pair up) over ``aa_cases_per_kernel`` cases of every kernel; ``ncu_kernel``: the GPU
    function name of the %SOL case's kernel, for ncu's filter; ``deadline_s``: the hard
    limit for everything."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    options: SelfcheckOptions = field(
        default_factory=lambda: SelfcheckOptions(
            bench=BenchOptions(budget_s=0.5, warmup_s=0.1, cool_down_s=0.1, baseline=False)
        )
    )
    check_workload: str = "smoke"
    #: What the correctness stage checks beside ``options.dtype``: the formats that have no
    #: bf16 form (``harness/build/sass.py``'s FP4 dtypes).
    check_dtypes: tuple[str, ...] = tuple(sorted(FP4_DTYPES))
    cuda_kernels: tuple[str, ...] = ("silu_and_mul_cuda",)
    cute_kernels: tuple[str, ...] = ("silu_and_mul_cute",)
    aa_options: BenchOptions = field(
        default_factory=lambda: BenchOptions(
            budget_s=0.25, min_time_s=0.02, warmup_s=0.05, cool_down_s=0.02, timeout_s=5.0,
            baseline=False,
        )
    )  # fmt: skip
    aa_processes: int = 4
    aa_cases_per_kernel: int = 2
    ncu_kernel: str = "silu_and_mul_kernel"
    deadline_s: float = 450.0
    case_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.aa_processes < 2 or self.aa_processes % 2:
            raise ValueError(
                f"aa_processes={self.aa_processes}: the A/A processes pair up, so it takes an "
                "even number of at least 2"
            )

    @property
    def trusted(self) -> bool:
        """Whether the suite is the built-in one (trusted code) rather than a checkout's."""
        suite = self.suite
        return suite.target == BUILTIN_SUITE and suite.root is None and suite.src is None


class Backend(Protocol):
    """Runs the stages (``stop_at`` is on the backend's ``clock``)."""

    clock: Callable[[], float]

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]: ...

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]: ...

    def benches(
        self, request: BenchRequest, on_plan: Callable[[int], None]
    ) -> Iterator[Measurement]: ...

    def has_ncu(self) -> bool: ...

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]: ...

    def isolation(self) -> str:
        """One line: how the stages' children are isolated here."""
        ...


class ChildBackend:
    """The stages in child processes on this machine's device, in one sandbox held while
    the backend is entered (``with ChildBackend(trusted) as backend``)."""

    clock = staticmethod(time.monotonic)

    def __init__(self, trusted: bool = False) -> None:
        self.trusted = trusted
        self._stack = contextlib.ExitStack()
        self._box: Sandbox | None = None

    def __enter__(self) -> ChildBackend:
        self._box = self._stack.enter_context(held_sandbox(self.trusted))
        return self

    def __exit__(self, *exc: object) -> None:
        self._box = None
        self._stack.close()

    def isolation(self) -> str:
        assert self._box is not None, "enter the backend first"
        return self._box.describe()

    def measurements(
        self, plan: SelfcheckPlan, stop_at: float, progress: Callable[[str], None]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        return run_selfcheck(SelfcheckRequest(plan.suite, plan.options, stop_at), progress)

    def checks(
        self, request: CheckRequest, on_plan: Callable[[int], None]
    ) -> Iterator[CorrectnessResult]:
        return run_checks(request, on_plan)

    def benches(
        self, request: BenchRequest, on_plan: Callable[[int], None]
    ) -> Iterator[Measurement]:
        return run_benches(request, on_plan)

    def has_ncu(self) -> bool:
        return shutil.which("ncu") is not None

    def ncu(self, plan: SelfcheckPlan, stop_at: float) -> dict[str, Any]:
        """The %SOL case launched in a run of its own inside ``ncu``, which profiles its first
        launches with caches flushed and clocks left alone (as ours run). That run's own
        timing is not used: ncu serialises and replays what it profiles.

        ncu runs inside the child's jail, as the sandbox user: its folder is exposed there
        and its log kept in the sandbox's own temporary folder (the parent's is hidden), and
        when the run fails the error ends with what ncu last logged (a permission it lacks,
        a kernel it did not find), which it prints nowhere else."""
        ncu = shutil.which("ncu")
        assert ncu is not None and self._box is not None, "enter the backend first"
        self._box.exposed.add(str(Path(ncu).resolve().parent))
        with tempfile.TemporaryDirectory(prefix="ncu-", dir=self._box.root / "tmp") as tmp:
            if self._box.identity is not None:
                os.chown(tmp, self._box.identity.uid, self._box.identity.gid)
            log = Path(tmp) / "ncu.csv"
            wrapper = (
                ncu, "--csv", "--log-file", str(log), "--metrics", "gpu__time_duration.sum",
                "--cache-control", "all", "--clock-control", "none", "--target-processes",
                "all", "--kernel-name", f"regex:{plan.ncu_kernel}", "--launch-count",
                str(NCU_LAUNCHES),
            )  # fmt: skip
            options = replace(plan.options, steps=("sol",))
            request = SelfcheckRequest(plan.suite, options, stop_at, wrapper)
            try:
                sol = dict(run_selfcheck(request, lambda message: None)).get("sol") or {}
            except SuiteError as exc:
                said = _last_lines(log)
                raise SuiteError(f"{exc}; ncu logged: {said}" if said else str(exc)) from exc
            text = log.read_text(errors="replace") if log.exists() else ""
        durations = parse_ncu_durations(text)
        return {
            "available": True,
            "kernel": sol.get("kernel"),
            "case": sol.get("case"),
            "ncu_ns": durations,
            "note": "" if durations else (text.strip().splitlines() or ["no ncu output"])[-1],
        }


def _last_lines(log: Path, count: int = 3) -> str:
    """The last ``count`` non-blank lines of ncu's log, joined, or "" when there is none."""
    if not log.exists():
        return ""
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()]
    return " | ".join([line for line in lines if line][-count:])


#: A finding (a dataclass: ``selfcheck.json`` keeps it as ``asdict`` writes it).
F = TypeVar("F")


@dataclass(frozen=True)
class Judging(Generic[F]):
    """The self-check's decisions, passed in by the caller. ``pair``: an A/A case's verdict
    fields as ``aa.json`` keeps them, from its two measurements; ``findings``: every
    question's finding from the stages' data so far; ``summary``: ``summary.md`` from the
    findings, the data, each stage's line, the seconds taken and the deadline;
    ``settled``: whether the findings let the self-check exit 0; ``trace``: the traced
    step's data with its profiler trace read into the share table (``serving/``'s reader,
    which the harness may not import)."""

    pair: Callable[[Measurement, Measurement], dict[str, Any]]
    findings: Callable[[Mapping[str, Any]], list[F]]
    summary: Callable[[list[F], Mapping[str, Any], Mapping[str, str], float, float], str]
    settled: Callable[[list[F]], bool]
    trace: Callable[[Mapping[str, Any]], dict[str, Any]]


#: ncu's duration units, long (older releases) and short (2025's, on the H200).
_UNITS_NS = {
    "nsecond": 1.0, "usecond": 1e3, "msecond": 1e6, "second": 1e9,
    "ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9,
}  # fmt: skip


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
    """The report folder, rewritten after every step: ``selfcheck.json`` (the findings, each
    stage's line and data) and the markdown summary."""

    def __init__(self, out_root: Path, day: date, plan: SelfcheckPlan, judging: Judging[F]) -> None:
        self.out_root, self.day, self.plan, self.judging = out_root, day, plan, judging
        self.data: dict[str, dict[str, Any]] = {}
        self.stages: dict[str, str] = {}
        self.folder: Path | None = None
        self.seconds = 0.0
        #: Each stage's seconds by the self-check's clock, as it ended (issue 49).
        self.spent: dict[str, float] = {}

    def update(self, stage: str, data: dict[str, Any], seconds: float) -> None:
        self.data[stage] = data
        self.seconds = seconds
        self.write()

    def write(self) -> list[F]:
        folder = self._folder()
        findings = self.judging.findings(self.data)
        _write_json(
            folder / "selfcheck.json",
            {
                "device": (self.data.get("device") or {}).get("device"),
                "seconds": round(self.seconds, 1),
                "deadline_s": self.plan.deadline_s,
                "stages": self.stages,
                # The device time the whole self-check held the GPU, as every stage of a
                # run is counted (harness/records.py StageTime), and each of its stages'.
                "device_time": {
                    **asdict(StageTime("selfcheck", round(self.seconds, 3))),
                    "by_stage": self.spent,
                },
                "findings": [asdict(f) for f in findings],
                "data": self.data,
            },
        )
        summary = self.judging.summary(
            findings, self.data, self.stages, self.seconds, self.plan.deadline_s
        )
        _write_text(folder / "summary.md", summary)
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
    _write_text(path, json.dumps(data, indent=1, allow_nan=False) + "\n")


def _write_text(path: Path, text: str) -> None:
    """Written whole or not at all: a kill mid-write leaves the previous version."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
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
    report.stages["sandbox"] = backend.isolation()
    stages = [(name, s) for name, s in STAGES if name != "ncu" or backend.has_ncu()]
    scale = plan.deadline_s / sum(share for _, share in stages)
    for index, (stage, _) in enumerate(stages):
        stop_at = run.start + scale * sum(share for _, share in stages[: index + 1])
        if stop_at - backend.clock() < MIN_STAGE_S:
            report.stages[stage] = "not run: out of time"
            continue
        progress(stage)
        began = backend.clock()
        try:
            _STAGE_RUNNERS[stage](run, stop_at)
            ended = "stopped at its deadline" if backend.clock() >= stop_at else "done"
        except SuiteError as exc:  # this stage's child died: the other stages still run
            ended = f"failed: {exc}"
        report.stages[stage] = f"{ended} in {backend.clock() - began:.0f} s"
        report.spent[stage] = round(backend.clock() - began, 3)
        report.seconds = backend.clock() - run.start
        report.write()
    if not backend.has_ncu():
        report.stages["ncu"] = "skipped: ncu is not on this host"
        run.save("ncu", {"available": False})
    report.seconds = backend.clock() - run.start
    findings = report.write()
    assert report.folder is not None
    return Outcome(report.folder, findings, judging.settled(findings))


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
        # The trace itself is read here and not kept: the report holds its share table.
        run.save(name, run.report.judging.trace(data) if name == "trace" else data)


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
    # The pinned configs, not autotuning at smoke shapes: bf16 numerics are the question,
    # and sixteen GEMM configs a specialisation would not fit the stage (docs/TIMING.md).
    selection = {**_selection(plan, stop_at), "dtypes": (options.dtype, *plan.check_dtypes)}
    request = CheckRequest(workload=plan.check_workload, autotune=False, **selection)
    run.records(
        "correctness",
        lambda planned: run.backend.checks(request, planned),
        _check,
        dtype=options.dtype,
        cuda_kernels=list(plan.cuda_kernels),
        cute_kernels=list(plan.cute_kernels),
        cute_dsl=dsl_version(),
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
    """The A/A pairs and the coverage repeats from ``aa_processes`` independent children."""
    plan, clock = run.plan, run.backend.clock
    count = plan.aa_processes
    judge = run.report.judging.pair
    rows: dict[str, dict[str, Any]] = {}  # case -> kernel, label and a record per process
    aa: dict[str, Any] = {"planned": 0, "processes": count, "seeds": [], "cases": []}
    coverage: dict[str, Any] = {"processes": count, "cases": []}

    judged: dict[tuple[str, int], dict[str, Any]] = {}  # each pair judged once (a bootstrap)

    def publish() -> None:
        pairs, repeats = [], []
        for key, row in rows.items():
            records = row["records"]
            for first in range(0, len(records) - 1, 2):
                if (key, first) not in judged:
                    judged[key, first] = _pair(row, records[first], records[first + 1], judge)
                pairs.append(judged[key, first])
            repeats.append({"kernel": row["kernel"], "case": row["case"],
                            "repeats": [_repeat(r) for r in records]})  # fmt: skip
        aa["cases"], coverage["cases"] = pairs, repeats
        run.report.data["aa"] = aa  # written with the coverage, in one go
        run.save("coverage", coverage)

    def planned(cases: int) -> None:
        aa["planned"] = cases * (count // 2)

    shares = [CHECK_SHARES, *[1.0] * count]

    def until(step: int) -> float:
        return clock() + (stop_at - clock()) * shares[step] / sum(shares[step:])

    # Every process launches the configs a check of these cases chose, as a PR's A/B pins
    # its check's on both sides: an A/A then compares timing, not two autotuning races, nor
    # an autotuned process with pinned ones (on the H200 the one that had autotuned read
    # 2-6% faster than the others on every few-microsecond kernel).
    chooser = CheckRequest(
        workload=plan.options.workload,
        seed=0,
        cases_per_kernel=plan.aa_cases_per_kernel,
        **_selection(plan, until(0)),
    )
    pins = pins_from_records(run.backend.checks(chooser, lambda cases: None))
    options = replace(plan.aa_options, pins=pins, pin_source="checked")
    for index in range(count):
        seed = index + 1
        aa["seeds"].append(seed)
        request = BenchRequest(
            workload=plan.options.workload,
            options=options,
            seed=seed,
            cases_per_kernel=plan.aa_cases_per_kernel,
            **_selection(plan, until(seed)),
        )
        for record in run.backend.benches(request, planned):
            label = record.case.label()
            row = rows.setdefault(
                f"{record.case.kernel} {label} {record.case.dtype}",
                {"kernel": record.case.kernel, "case": label, "records": []},
            )
            if len(row["records"]) == index:  # a case every earlier process reached
                row["records"].append(record)
                publish()
        publish()
        if clock() >= stop_at:
            break


def _pair(
    row: Mapping[str, Any],
    base: Measurement,
    head: Measurement,
    verdict: Callable[[Measurement, Measurement], dict[str, Any]],
) -> dict[str, Any]:
    """One A/A pair as the report keeps it: the verdict and its numbers, not the samples."""
    failed = next((m for m in (base, head) if m.status != "ok"), None)
    pair: dict[str, Any] = {
        "kernel": row["kernel"],
        "case": row["case"],
        "status": "ok" if failed is None else failed.status,
        "reason": "" if failed is None else failed.reason,
        "verdict": None,
    }
    if failed is None:
        pair.update(verdict(base, head))
    return pair


def _repeat(record: Measurement) -> dict[str, Any] | None:
    return asdict(record.summary) if record.status == "ok" and record.summary else None


def _ncu(run: _Run, stop_at: float) -> None:
    # Ours from the unprofiled measurements stage: the profiled run's own times include
    # ncu's serialisation and replays.
    sol = run.report.data.get("sol") or {}
    run.save("ncu", {**run.backend.ncu(run.plan, stop_at), "ours_ns": sol.get("median_ns")})


_STAGE_RUNNERS: dict[str, Callable[[_Run, float], None]] = {
    "measurements": _measurements,
    "correctness": _correctness,
    "aa": _aa,
    "ncu": _ncu,
}
