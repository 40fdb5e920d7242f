"""The bisect flow: find the commit that made kernels slower, by a binary search on
interleaved A/B verdicts (``analysis/bisect_search.py`` decides; this flow measures and stores).

Each probe times the probed commit interleaved against the known-good one on this device
(``tasks.ab``), so the verdict is immune to drift between nights; every probe's samples are
stored as ``bisect`` runs, every step in ``bisect_steps``, and the culprit goes back to the
regression. Nightly detection starts it for each regression it opens; ``kernelwatch bisect``
runs it by hand.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prefect import flow

from kernelwatch.analysis.bisect_search import BisectConfig, BisectOutcome, Probe
from kernelwatch.analysis.bisect_search import bisect as search
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.verdict import ABVerdict, compare_measurements
from kernelwatch.config import settings as configuration
from kernelwatch.flows import pipeline, tasks
from kernelwatch.flows.repos import commit_info, commits_between
from kernelwatch.harness.records import ABMeasurement, CaseId, CommitInfo, DeviceInfo
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.worktree import RevisionError, checkout
from kernelwatch.store.bisect_steps import record_bisection
from kernelwatch.store.identity import series_key
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
    if regression_id is not None:
        good, bad, cases = _regression_target(regression_id, good, bad)
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
    infos = {sha: commit_info(path, sha, repo.branch) for sha in commits}
    context = pipeline.RunContext("bisect", repo.name, pool, tasks.flow_run_id())
    timeout = config.run.case_timeout_s
    devices: list[DeviceInfo] = []
    series: dict[str, str] = {}
    kernel_of: dict[str, str] = {}

    with checkout(path, commits[0]) as good_tree:

        def probe(commit: str, round_: int) -> Probe:
            started = pipeline.now()
            with checkout(path, commit) as tree:
                pairs = tasks.ab(
                    repo, good_tree.path, tree.path, selection, more_samples(config.bench, round_),
                    timeout, config.pool(pool).gpus_per_node,
                )  # fmt: skip
            _store(context, infos, commits[0], commit, pairs, started)
            devices.extend(p.device for p in pairs[:1])
            for pair in pairs:
                key = series_key(repo.name, pair.case, pair.device.name, pair.method)
                series[case_label(pair.case)] = key
                kernel_of[case_label(pair.case)] = pair.case.kernel
            return probe_result(pairs, cases, config.thresholds)

        outcome = search(
            commits,
            probe,
            config.bisect.budget_s,
            BisectConfig(max_rounds=config.bisect.max_rounds),
            lambda label: config.thresholds.for_kernel(kernel_of[label]).bisect,
        )
    if devices:
        with tasks.store_connection() as conn:
            record_bisection(
                conn,
                outcome,
                bisect_id=str(uuid.uuid4()),
                repository=repo.name,
                regression_id=regression_id,
                device=devices[0],
                series=series,
                commits=infos,
            )
    return _summary(repo.name, regression_id, outcome, infos)


def _regression_target(
    regression_id: int, good: str | None, bad: str | None
) -> tuple[str | None, str | None, set[CaseKey]]:
    with tasks.store_connection() as conn:
        row = show_regression(conn, regression_id)
    cases = {case_key(cp) for cp in row["change_point_list"] if cp.get("direction") == "regression"}
    return good or row.get("good_sha"), bad or row.get("bad_sha"), cases


def _store(
    context: pipeline.RunContext,
    infos: Mapping[str, CommitInfo],
    good: str,
    probed: str,
    pairs: Sequence[ABMeasurement],
    started: str,
) -> None:
    base, head = pipeline.split_ab(pairs)
    for commit, records, against in ((good, base, None), (probed, head, good)):
        run = pipeline.assemble(context, infos[commit], records, started, base_commit=against)
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
