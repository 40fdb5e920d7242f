"""The stages of one commit's run, as plain functions: build, check, time, A/B, assemble the
run. The Prefect tasks (``tasks.py``) wrap them; tests and the flows share them.

Kernel code runs only in the harness's child processes (``harness/isolation/supervise.py``): a
crash, hang or NaN in one case becomes that case's failure record with the stderr tail, and
every other case still runs. What is left here is choosing what to run and packaging records.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Generic, TypeVar

from kernelwatch.analysis.build_identity import CaseKey, case_key, identities
from kernelwatch.analysis.suspicion import too_wide
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.config.settings import RepositoryConfig
from kernelwatch.harness.build.cache import default_cache_dir
from kernelwatch.harness.build.stage import BuildRequest, BuildResult, run_build
from kernelwatch.harness.isolation.ab_sides import run_ab
from kernelwatch.harness.isolation.supervise import (
    ABRequest,
    BenchRequest,
    CheckRequest,
    died,
    run_benches,
    run_checks,
)
from kernelwatch.harness.records import (
    ABMeasurement,
    BuildMetrics,
    CommitInfo,
    CorrectnessResult,
    Measurement,
    RunInfo,
    StageTime,
)
from kernelwatch.harness.suite import SuiteRef, at_revision
from kernelwatch.harness.timing.pinning import pins_from_records
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.store.runfile import Run, RunRecord

_R = TypeVar("_R")


@dataclass(frozen=True)
class Timed(Generic[_R]):
    """A device stage's records and the device time it took (``StageTime``)."""

    records: list[_R]
    time: StageTime
    #: What a device-time budget left untimed, in one line (None: nothing).
    untimed: str | None = None


def timed(stage: str, call: Callable[[], list[_R]]) -> Timed[_R]:
    """Run one device stage (``call`` starts its children and returns their records),
    timed by this process's clock from its start to its end."""
    start = time.monotonic()
    records = call()
    return Timed(records, StageTime(stage, round(time.monotonic() - start, 3), len(records)))


def total(stage: str, parts: Iterable[StageTime]) -> StageTime | None:
    """The device time of ``parts`` (the rounds of one stage) as one ``stage``; None when
    there were none."""
    spent = list(parts)
    if not spent:
        return None
    return StageTime(stage, round(sum(p.device_s for p in spent), 3), sum(p.cases for p in spent))


def suite_at(repo: RepositoryConfig, checkout: Path) -> SuiteRef:
    """The repository's suite as imported from one checkout: a suite file inside the
    repository is that checkout's, even when configured by its absolute path."""
    source = Path(repo.source).expanduser()
    return at_revision(SuiteRef(repo.suite, str(source), repo.src or None), source, checkout)


def build_stage(
    repo: RepositoryConfig,
    checkout: Path,
    kernels: Sequence[str],
    trusted: bool = True,
    every_dtype: bool = False,
) -> BuildResult:
    """Cross-compile ``kernels`` for the repository's archs (none configured: nothing), with
    each case's recipe (with ``every_dtype``, of every dtype the timing stage runs, those
    not built identified by their builds' cache keys).
    Unchanged kernels come from the build cache, keyed by their source; only a ``trusted``
    run (not a pull request's) adds to it."""
    if not repo.archs or not kernels:
        return BuildResult("", [])
    request = BuildRequest(
        suite=suite_at(repo, checkout),
        archs=repo.archs,
        kernels=tuple(kernels),
        workload=repo.build_workload or repo.workload,
        dtypes=repo.dtypes,
        every_dtype=every_dtype,
        cache_dir=str(default_cache_dir()),
        cache_writes=trusted,
    )
    return run_build(request)


def check_stage(
    repo: RepositoryConfig, checkout: Path, case_timeout_s: float, kernels: Sequence[str] = ()
) -> list[CorrectnessResult]:
    """Every selected case against its float64 reference."""
    request = CheckRequest(
        suite=suite_at(repo, checkout),
        kernels=tuple(kernels or repo.kernels),
        workload=repo.workload,
        dtypes=repo.dtypes,
        params=repo.params,
        case_timeout_s=case_timeout_s,
    )
    return list(run_checks(request))


def buildable_kernels(checks: Iterable[CorrectnessResult]) -> tuple[str, ...]:
    """The kernels worth cross-compiling: all but those whose host code crashed the check's
    process or hung in it. Recording a kernel's launches for the build runs that host code
    again, and one crash there would cost every kernel's build. A case that raised costs
    only its own dtype's build (the build records that failure), and a wrong result is
    still built, since its static metrics may explain it."""
    checks = list(checks)
    dead = {c.case.kernel for c in checks if c.verdict == "error" and died(c)}
    return tuple(dict.fromkeys(c.case.kernel for c in checks if c.case.kernel not in dead))


def timed_kernels(checks: Iterable[CorrectnessResult]) -> tuple[str, ...]:
    """The kernels worth timing: every case of theirs passed or is unsupported on this
    device. A kernel with a wrong, crashing or hanging case is not timed: its time would
    mean nothing, and its failure is already a result."""
    ok: dict[str, bool] = {}
    for check in checks:
        good = check.verdict in ("pass", "unsupported")
        ok[check.case.kernel] = ok.get(check.case.kernel, True) and good
    return tuple(kernel for kernel, good in ok.items() if good)


def checked_options(options: BenchOptions, checks: Iterable[CorrectnessResult]) -> BenchOptions:
    """``options`` with every config the check verified pinned, so bench times exactly those:
    check and bench run in separate processes, and each would otherwise autotune anew."""
    return replace(options, pins=pins_from_records(checks), pin_source="checked")


def bench_stage(
    repo: RepositoryConfig,
    checkout: Path,
    kernels: Sequence[str],
    options: BenchOptions,
    case_timeout_s: float,
    budget_s: float | None = None,
    on_plan: Callable[[int], None] | None = None,
) -> list[Measurement]:
    """Time ``kernels`` (all of them must have passed correctness) with ``options``; with
    ``budget_s``, only the cases done within that many seconds of the start (the one then
    running is stopped). ``on_plan`` is told how many cases the child planned."""
    if not kernels:
        return []
    request = BenchRequest(
        suite=suite_at(repo, checkout),
        kernels=tuple(kernels),
        workload=repo.workload,
        dtypes=repo.dtypes,
        params=repo.params,
        case_timeout_s=case_timeout_s,
        options=options,
        stop_at=None if budget_s is None else time.monotonic() + budget_s,
    )
    return list(run_benches(request, on_plan))


def untimed_by_budget(
    kernels: Sequence[str], measured: Sequence[Measurement], planned: int, budget_s: float | None
) -> str | None:
    """What a timing stage stopped by its device-time budget left untimed, in one line
    (None: it timed every case it planned)."""
    if budget_s is None or len(measured) >= planned:
        return None
    timed = {m.case.kernel for m in measured}
    none = [k for k in kernels if k not in timed]
    which = f"; not a case timed of {', '.join(none)}" if none else ""
    return (
        f"the timing stopped at the pool's {budget_s:.0f} s budget ([cost] nightly_budget_s): "
        f"{planned - len(measured)} of {planned} cases untimed{which}"
    )


def ab_stage(
    repo: RepositoryConfig,
    base: Path,
    head: Path,
    kernels: Sequence[str] | None,
    options: BenchOptions,
    case_timeout_s: float,
) -> list[ABMeasurement]:
    """Time ``kernels`` (None: the repository's selection) at ``base`` (A) and ``head`` (B)
    interleaved on this device."""
    if kernels is not None and not kernels:
        return []
    request = ABRequest(
        suite=suite_at(repo, base),
        suite_b=suite_at(repo, head),
        kernels=tuple(repo.kernels if kernels is None else kernels),
        workload=repo.workload,
        dtypes=repo.dtypes,
        params=repo.params,
        case_timeout_s=case_timeout_s,
        options=options,
    )
    return list(run_ab(request))


def _wide(m: Measurement, thresholds: Thresholds) -> bool:
    margin = thresholds.for_kernel(m.case.kernel).confirm.min_change
    return (
        m.status == "ok" and m.summary is not None and too_wide(m.summary.rel_ci_halfwidth, margin)
    )


def wide_kernels(measured: Iterable[Measurement], thresholds: Thresholds) -> tuple[str, ...]:
    """The kernels with a point too wide to judge (each kernel's own margin, ``[confirm]
    min_change``): what a nightly measures again."""
    return tuple(dict.fromkeys(m.case.kernel for m in measured if _wide(m, thresholds)))


def judged(
    first: Sequence[Measurement], again: Iterable[Measurement], thresholds: Thresholds
) -> list[Measurement]:
    """The night's points: each of ``first`` too wide to judge replaced by its case's
    measurement in ``again`` where that one is ok and narrower, and marked unjudged if the
    one kept is still too wide."""
    second = {_key(m): m for m in again if m.status == "ok" and m.summary is not None}
    out = []
    for m in first:
        if not _wide(m, thresholds):
            out.append(m)
            continue
        other = second.get(_key(m))
        assert m.summary is not None  # _wide
        if other is not None and other.summary.rel_ci_halfwidth < m.summary.rel_ci_halfwidth:
            m = other
        out.append(replace(m, unjudged=_wide(m, thresholds)))
    return out


def _key(m: Measurement) -> CaseKey:
    return case_key(m.case.kernel, m.case.dtype, m.case.params)


def split_ab(pairs: Iterable[ABMeasurement]) -> tuple[list[Measurement], list[Measurement]]:
    """The base side and the head side of A/B records, for storing each with its commit (a
    case that was not timed is stored on both sides with its status and reason)."""
    sides = [pair.sides() for pair in pairs]
    return [base for base, _ in sides], [head for _, head in sides]


def case_identities(
    repo: RepositoryConfig, built: BuildResult, declared: Mapping[str, str]
) -> dict[CaseKey, str | None]:
    """Each built case's build identity, with the environment the commit declares
    (:func:`~kernelwatch.flows.repos.declared_environment`); none where the build specialised
    for a workload other than the timed one (its recipes are of other cases)."""
    if (repo.build_workload or repo.workload) != repo.workload:
        return {}
    return identities(built.recipes, built.records, declared)


def identified(
    measurements: Iterable[Measurement], ids: Mapping[CaseKey, str | None]
) -> list[Measurement]:
    """``measurements``, each with its case's build identity where it is known."""
    return [
        replace(m, build_identity=ids.get(case_key(m.case.kernel, m.case.dtype, m.case.params)))
        for m in measurements
    ]


@dataclass(frozen=True)
class RunContext:
    """Who asked for a run and where it ran: the part of its header the records don't say."""

    trigger: str
    repository: str
    pool: str
    orchestration_id: str | None = None


def assemble(
    context: RunContext,
    commit: CommitInfo,
    records: Sequence[RunRecord],
    started_at: str,
    base_commit: str | None = None,
    stages: Iterable[StageTime | None] = (),
) -> Run | None:
    """The run of ``records`` at ``commit``, with the device time of its ``stages`` (None:
    a stage that did not run); None when no record says which device it ran on (the suite
    did not even load), since a run without a device cannot be compared."""
    located = [r for r in records if isinstance(r, CorrectnessResult | Measurement)]
    if not located:
        return None
    first = located[0]
    info = RunInfo(
        run_id=str(uuid.uuid4()),
        trigger=context.trigger,
        repository=context.repository,
        suite=first.case.suite,
        commit=commit,
        device=first.device,
        software=first.software,
        started_at=started_at,
        status=run_status(records),
        finished_at=now(),
        base_commit=base_commit,
        pool=context.pool,
        orchestration_id=context.orchestration_id,
        stages=tuple(s for s in stages if s is not None),
    )
    return Run.of(info, records)


def run_status(records: Iterable[RunRecord]) -> str:
    """``ok`` when every case ran cleanly, ``partial`` when some failed, crashed or hung."""
    for record in records:
        if isinstance(record, CorrectnessResult) and record.verdict in ("fail", "error"):
            return "partial"
        if isinstance(record, Measurement | BuildMetrics) and record.status == "error":
            return "partial"
    return "ok"


def failed_kernels(records: Iterable[RunRecord]) -> dict[str, str]:
    """Each kernel that failed somewhere in ``records``, with its first reason."""
    failed: dict[str, str] = {}
    for record in records:
        bad = (isinstance(record, CorrectnessResult) and record.verdict in ("fail", "error")) or (
            isinstance(record, Measurement) and record.status == "error"
        )
        if bad:
            failed.setdefault(record.case.kernel, record.reason)
    return failed


def now() -> str:
    """The current time in the records' ISO-8601 form."""
    return datetime.now(UTC).isoformat()
