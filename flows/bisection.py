"""The bisect flow: find the commit that made kernels slower, by a binary search on
interleaved A/B verdicts (``analysis/bisect_search.py`` decides; this flow measures and stores).

Each probe times the probed commit interleaved against the known-good one on this device
(``tasks.ab``), so the verdict is immune to drift between nights; every probe's samples are
stored as ``bisect`` runs, every step in ``bisect_steps``, and the culprit goes back to the
regression. A correctness regression is bisected with the correctness check as the probe
(``bisect_checks``): a commit is bad when a case failing tonight fails there. The nightly
starts it for each timing or correctness regression it opens; ``kernelwatch bisect`` runs it
by hand.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prefect import flow

from kernelwatch.analysis.bisect_search import BisectConfig, BisectOutcome, Probe, bisect_checks
from kernelwatch.analysis.bisect_search import bisect as search
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.verdict import ABVerdict, compare_measurements
from kernelwatch.config import settings as configuration
from kernelwatch.flows import pipeline, tasks
from kernelwatch.flows.repos import commit_info, commits_between
from kernelwatch.harness.isolation.worktree import RevisionError, checkout
from kernelwatch.harness.records import ABMeasurement, CaseId, CommitInfo, DeviceInfo, StageTime
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.store.bisect_steps import record_bisection
from kernelwatch.store.identity import series_key
from kernelwatch.store.suspects import regression_cases
from kernelwatch.store.triage_state import show_regression

#: A case as a regression names it: kernel, canonical parameters, dtype.
CaseKey = tuple[str, str, str]


@dataclass(frozen=True)
class BisectSummary:
    """The outcome in a form a person, the nightly summary and the CLI print."""

    repository: str
    regression_id: int | None
    status: str
    culprit: str | None
    culprit_subject: str | None
    first: str
    last: str
    probes: int
    gpu_seconds: float
    reason: str = ""

    def line(self) -> str:
        """One line: the culprit, or why there is none and what range is left."""
        spent = f"{self.probes} probes, {self.gpu_seconds:.1f} s of device time"
        if self.culprit is not None:
            return f"culprit {self.culprit[:12]} {self.culprit_subject!r} ({spent})"
        return f"{self.status}: between {self.first[:12]} and {self.last[:12]} ({spent})" + (
            f"; {self.reason}" if self.reason else ""
        )


def case_key(case: CaseId | Mapping[str, Any]) -> CaseKey:
    """A case's identity across the store and the records."""
    if isinstance(case, CaseId):
        return case.kernel, _params(case.params), case.dtype
    return case["kernel"], _params(case["params"]), case["dtype"]


def more_samples(options: BenchOptions, round_: int) -> BenchOptions:
    """The bench options of an ambiguous probe's ``round_``-th re-measurement: twice the
    samples and budget each round, and a tighter interval to aim for."""
    scale = 2**round_
    return dataclasses.replace(
        options,
        min_samples=options.min_samples * scale,
        budget_s=options.budget_s * scale if options.budget_s is not None else None,
        target_rel_ci=options.target_rel_ci / scale,
    )


def case_label(case: CaseId) -> str:
    """How a bisection names a case in its steps."""
    return f"{case.kernel} {case.label()} {case.dtype}"


def probe_result(
    pairs: Sequence[ABMeasurement], cases: set[CaseKey] | None, thresholds: Thresholds
) -> Probe:
    """One probe's verdict per bisected case (``cases``; None: all), by case label, each
    with its kernel's verdict thresholds, and the cases that could not be compared (crash,
    hang, NaN) with their reason."""
    found: dict[str, ABVerdict] = {}
    errors: dict[str, str] = {}
    for pair in pairs:
        if cases is not None and case_key(pair.case) not in cases:
            continue
        label = case_label(pair.case)
        if pair.status == "ok" and pair.base is not None and pair.head is not None:
            verdict = thresholds.for_kernel(pair.case.kernel).verdict
            found[label] = compare_measurements(pair.base, pair.head, verdict)
        elif pair.status == "error":
            errors[label] = pair.reason
    return Probe(found, sum(p.duration_s for p in pairs), errors=errors)


@flow(name="bisect")
def bisect(
    repository: str | None = None,
    good: str | None = None,
    bad: str | None = None,
    regression_id: int | None = None,
    pool: str = configuration.LOCAL_POOL,
    kernels: tuple[str, ...] = (),
) -> BisectSummary:
    """Bisect ``good``..``bad`` of ``repository`` (or the range and cases of the stored
    regression ``regression_id``) on this worker's device."""
    config = configuration.load()
    repo = config.repository(repository)
    config.pool(pool)
    cases: set[CaseKey] | None = None
    selection: tuple[str, ...] | None = kernels or None
    kind = "timing"
    if regression_id is not None:
        good, bad, cases, kind = _regression_target(regression_id, good, bad)
        selection = kernels or tuple(sorted({k for k, _, _ in cases}))
    if good is None or bad is None:
        raise RevisionError("a bisection needs a good and a bad revision")
    path = tasks.sync_repository(repo)
    commits = commits_between(path, good, bad)
    if len(commits) - 1 > config.bisect.max_commits:
        raise RevisionError(
            f"{len(commits) - 1} commits between {good} and {bad}: more than [bisect] "
            f"max_commits = {config.bisect.max_commits}"
        )
    job = _Job(
        config=config,
        repo=repo,
        path=path,
        commits=commits,
        selection=selection,
        cases=cases,
        context=pipeline.RunContext("bisect", repo.name, pool, tasks.flow_run_id()),
        infos={sha: commit_info(path, sha, repo.branch) for sha in commits},
    )
    outcome = _search_checks(job) if kind == "correctness" else _search_ab(job)
    if job.devices:
        with tasks.store_connection() as conn:
            record_bisection(
                conn,
                outcome,
                bisect_id=str(uuid.uuid4()),
                repository=repo.name,
                regression_id=regression_id,
                device=job.devices[0],
                series=job.series,
                commits=job.infos,
            )
    return _summary(repo.name, regression_id, outcome, job.infos)


@dataclass
class _Job:
    """One bisection's range and selection, and what its probes saw: the device and each
    case's series key (empty for a correctness probe, which is no series)."""

    config: configuration.Config
    repo: configuration.RepositoryConfig
    path: Path
    commits: Sequence[str]
    selection: tuple[str, ...] | None
    cases: set[CaseKey] | None
    context: pipeline.RunContext
    infos: Mapping[str, CommitInfo]
    devices: list[DeviceInfo] = field(default_factory=list)
    series: dict[str, str] = field(default_factory=dict)


def _search_ab(job: _Job) -> BisectOutcome:
    """Each probe timed interleaved against the good end, stored as ``bisect`` runs."""
    config, repo, commits = job.config, job.repo, job.commits
    timeout = config.run.case_timeout_s
    kernel_of: dict[str, str] = {}
    with checkout(job.path, commits[0]) as good_tree:

        def probe(commit: str, round_: int) -> Probe:
            started = pipeline.now()
            with checkout(job.path, commit) as tree:
                timed = tasks.ab(
                    repo, good_tree.path, tree.path, job.selection,
                    more_samples(config.bench, round_), timeout,
                    config.pool(job.context.pool).gpus_per_node, stage="bisect",
                )  # fmt: skip
            pairs = timed.records
            _store(job.context, job.infos, commits[0], commit, pairs, started, timed.time)
            job.devices.extend(p.device for p in pairs[:1])
            for pair in pairs:
                key = series_key(repo.name, pair.case, pair.device.name, pair.method)
                job.series[case_label(pair.case)] = key
                kernel_of[case_label(pair.case)] = pair.case.kernel
            return probe_result(pairs, job.cases, config.thresholds)

        return search(
            commits,
            probe,
            config.bisect.budget_s,
            BisectConfig(max_rounds=config.bisect.max_rounds),
            lambda label: config.thresholds.for_kernel(kernel_of[label]).bisect,
        )


def _search_checks(job: _Job) -> BisectOutcome:
    """Each probe the correctness check of the regression's kernels, stored as ``bisect``
    runs; the probe's cost is the check's time."""

    def check(commit: str, round_: int) -> Probe:
        started = pipeline.now()
        with checkout(job.path, commit) as tree:
            timed = tasks.check(
                job.repo, tree.path, job.config.run.case_timeout_s, job.selection or (),
                stage="bisect",
            )  # fmt: skip
        checks = timed.records
        run = pipeline.assemble(
            job.context, job.infos[commit], checks, started, stages=[timed.time]
        )
        if run is not None:
            tasks.store(run)
        job.devices.extend(c.device for c in checks[:1])
        found = {}
        for c in checks:
            if job.cases is None or case_key(c.case) in job.cases:
                found[case_label(c.case)] = c.verdict
                job.series[case_label(c.case)] = ""
        return Probe({}, sum(c.duration_s for c in checks), checks=found)

    return bisect_checks(job.commits, check, job.config.bisect.budget_s)


def _regression_target(
    regression_id: int, good: str | None, bad: str | None
) -> tuple[str | None, str | None, set[CaseKey], str]:
    """The stored regression's range, cases and kind: a timing regression's cases are its
    change points' series; a correctness regression's the cases that started failing."""
    with tasks.store_connection() as conn:
        row = show_regression(conn, regression_id)
        if row["kind"] == "correctness":
            cases = regression_cases(conn, regression_id, "correctness")
        else:
            cases = {
                case_key(cp)
                for cp in row["change_point_list"]
                if cp.get("direction") == "regression"
            }
    return good or row.get("good_sha"), bad or row.get("bad_sha"), cases, row["kind"]


def _store(
    context: pipeline.RunContext,
    infos: Mapping[str, CommitInfo],
    good: str,
    probed: str,
    pairs: Sequence[ABMeasurement],
    started: str,
    spent: StageTime,
) -> None:
    """A probe's two sides as runs; its device time is the probed commit's run's."""
    base, head = pipeline.split_ab(pairs)
    for commit, records, against, stages in (
        (good, base, None, ()),
        (probed, head, good, (spent,)),
    ):
        run = pipeline.assemble(
            context, infos[commit], records, started, base_commit=against, stages=stages
        )
        if run is not None:
            tasks.store(run)


def _summary(
    repository: str,
    regression_id: int | None,
    outcome: BisectOutcome,
    infos: Mapping[str, CommitInfo],
) -> BisectSummary:
    culprit = outcome.culprit
    subject = infos[culprit].message.splitlines()[0] if culprit else None
    first, last = outcome.range
    return BisectSummary(
        repository,
        regression_id,
        outcome.status,
        culprit,
        subject,
        first,
        last,
        len(outcome.steps),
        outcome.gpu_seconds,
        outcome.reason,
    )


def _params(params: Mapping[str, Any]) -> str:
    return ",".join(f"{k}={params[k]}" for k in sorted(params))
