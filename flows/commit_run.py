"""One commit on one device, end to end: checkout, correctness, build, timing of what passed,
store. The nightly flow runs it on the branch head; tests run it on planted commits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.config.settings import Config, RepositoryConfig
from kernelwatch.flows import pipeline, tasks
from kernelwatch.flows.repos import commit_info, declared_environment
from kernelwatch.harness.build.stage import BuildFailed
from kernelwatch.harness.isolation.supervise import SelectionUnavailable, SuiteError
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.records import Measurement


@dataclass(frozen=True)
class CommitOutcome:
    """What happened to one commit. ``status``: ``ok``, ``partial`` (some kernels failed,
    crashed, hung or returned NaN; everything else is stored) or ``failed`` (nothing could
    run: ``error`` says why). ``failed`` maps each failed kernel to its first reason."""

    sha: str
    status: str
    run_id: str | None = None
    cases: int = 0
    measured: int = 0
    failed: dict[str, str] = field(default_factory=dict)
    spooled: str | None = None
    error: str | None = None
    untimed: str | None = None
    #: Each point stored unjudged tonight: its kernel and relative CI half-width.
    unjudged: tuple[tuple[str, float], ...] = ()


def run_commit(
    config: Config,
    repo: RepositoryConfig,
    path: Path,
    sha: str,
    context: pipeline.RunContext,
) -> CommitOutcome:
    """Check, build and time ``sha`` of ``repo`` (checked out from ``path``) and store the
    run. Kernels are timed only after passing correctness; a point too wide to judge is
    timed again (``pipeline.judged``)."""
    commit = commit_info(path, sha, repo.branch)
    started = pipeline.now()
    timeout = config.run.case_timeout_s
    with checkout(path, sha) as tree:
        try:
            checked = tasks.check(repo, tree.path, timeout)
            checks = checked.records
            built = tasks.build(repo, sha, tree.path, pipeline.buildable_kernels(checks))
        except (BuildFailed, SuiteError, SelectionUnavailable) as exc:
            return CommitOutcome(sha, "failed", error=str(exc))
        kernels = pipeline.timed_kernels(checks)
        options = pipeline.checked_options(config.bench, checks)
        gpus = config.pool(context.pool).gpus_per_node
        budget = config.cost.of(context.pool).nightly_budget_s
        timed = tasks.bench(repo, tree.path, kernels, options, timeout, gpus, budget)
        points, bench_time = timed.records, timed.time
        # A point whose CI is wider than the margin it would be judged by is measured again
        # within what is left of the budget; still too wide, it is stored unjudged.
        wide = pipeline.wide_kernels(points, config.thresholds)
        left = None if budget is None else budget - timed.time.device_s
        again: list[Measurement] = []
        if wide and (left is None or left > 0):
            remeasured = tasks.bench(repo, tree.path, wide, options, timeout, gpus, left)
            again = remeasured.records
            bench_time = pipeline.total("bench", (timed.time, remeasured.time)) or bench_time
        points = pipeline.judged(points, again, config.thresholds)
    declared = declared_environment(path, sha, repo.environment_files)
    measurements = pipeline.identified(points, pipeline.case_identities(repo, built, declared))
    records = [*built.records, *checks, *measurements]
    run = pipeline.assemble(context, commit, records, started, stages=(checked.time, bench_time))
    if run is None:
        return CommitOutcome(sha, "failed", error="no case ran: the suite selected nothing")
    submitted = tasks.store(run)
    return CommitOutcome(
        sha,
        run.info.status,
        run_id=run.info.run_id,
        cases=len(checks),
        measured=sum(1 for m in measurements if m.status == "ok"),
        failed=pipeline.failed_kernels(records),
        spooled=str(submitted.spooled) if submitted.spooled else None,
        untimed=timed.untimed,
        unjudged=tuple(
            (m.case.kernel, m.summary.rel_ci_halfwidth)
            for m in measurements
            if m.unjudged and m.summary is not None
        ),
    )
