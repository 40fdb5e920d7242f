"""One commit on one device, end to end: checkout, correctness, build, timing of what passed,
store. The nightly flow runs it on the branch head; tests run it on planted commits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.config.settings import Config, RepositoryConfig
from kernelwatch.flows import pipeline, tasks
from kernelwatch.flows.repos import commit_info
from kernelwatch.harness.build.stage import BuildFailed
from kernelwatch.harness.isolation.supervise import SelectionUnavailable, SuiteError
from kernelwatch.harness.isolation.worktree import checkout


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


def run_commit(
    config: Config,
    repo: RepositoryConfig,
    path: Path,
    sha: str,
    context: pipeline.RunContext,
) -> CommitOutcome:
    """Check, build and time ``sha`` of ``repo`` (checked out from ``path``) and store the
    run. Kernels are timed only after passing correctness."""
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
    measurements = pipeline.identified(timed.records, pipeline.case_identities(repo, built))
    records = [*built.records, *checks, *measurements]
    run = pipeline.assemble(context, commit, records, started, stages=(checked.time, timed.time))
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
    )
