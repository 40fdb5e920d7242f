"""The nightly flow: the tracked branch's head on one pool's device, detection over the
stored history, one alert per culprit, automatic bisection of what it opened, notifications
and the report.

Deployed once per GPU pool (``prefect.yaml``), run locally by ``kernelwatch nightly``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from kernelwatch.config import settings as configuration
from kernelwatch.flows import tasks
from kernelwatch.flows.bisection import BisectSummary, bisect
from kernelwatch.flows.commit_run import CommitOutcome, run_commit
from kernelwatch.flows.notify import RegressionNotice, send
from kernelwatch.flows.pipeline import RunContext
from kernelwatch.flows.reporting import artifact_key, nightly_report, regression_notices
from kernelwatch.harness.worktree import resolve


@dataclass(frozen=True)
class NightlySummary:
    """What one nightly did: the commit's outcome, the detection pass, the bisections it
    started, the report's path and any notification that could not be delivered."""

    repository: str
    pool: str
    commit: CommitOutcome
    change_points: int
    opened: tuple[int, ...]
    closed: tuple[int, ...]
    bisections: tuple[BisectSummary, ...] = ()
    notices: tuple[RegressionNotice, ...] = ()
    report: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)

    def markdown(self) -> str:
        """The flow's artifact: a few lines a person reads on the flow run's page."""
        c = self.commit
        lines = [
            f"# nightly: {self.repository} on {self.pool}",
            f"- commit `{c.sha[:12]}`: **{c.status}**, {c.cases} cases checked, "
            f"{c.measured} timed" + (f"; error: {c.error}" if c.error else ""),
        ]
        lines += [f"  - `{k}` failed: {reason}" for k, reason in sorted(c.failed.items())]
        lines.append(
            f"- detection: {self.change_points} new change points, "
            f"{len(self.opened)} regressions opened, {len(self.closed)} closed"
        )
        for b in self.bisections:
            lines.append(f"- bisection of #{b.regression_id}: {b.line()}")
        if self.report:
            lines.append(f"- report: `{self.report}`")
        lines += [f"- problem: {p}" for p in self.problems]
        return "\n".join(lines) + "\n"


@flow(name="nightly")
def nightly(
    repository: str | None = None, pool: str = configuration.LOCAL_POOL, rev: str | None = None
) -> NightlySummary:
    """Run the nightly pipeline for ``repository`` (default: the only one configured) on
    this worker's device, at ``rev`` (default: the tracked branch's head)."""
    config = configuration.load()
    repo = config.repository(repository)
    config.pool(pool)
    path = tasks.sync_repository(repo)
    sha = resolve(path, rev or repo.branch)
    context = RunContext("nightly", repo.name, pool, tasks.flow_run_id())
    outcome = run_commit(config, repo, path, sha, context)
    found = tasks.detect(repo.name, config.thresholds)
    bisections: list[BisectSummary] = []
    problems: list[str] = []
    if config.bisect.auto:
        for regression_id in found.opened:
            # A bisection that cannot run (a range rewritten by a force-push, a good end
            # that no longer imports) is reported; the night's results stand without it.
            state = bisect(
                repository=repo.name, regression_id=regression_id, pool=pool, return_state=True
            )
            if state.is_completed():
                bisections.append(state.result())
            else:
                problems.append(f"bisection of regression #{regression_id} failed: {state.message}")
    report = nightly_report(config, repo.name)
    notices = regression_notices(found.opened, report)
    problems += send(notices, config.notifications)
    summary = NightlySummary(
        repository=repo.name,
        pool=pool,
        commit=outcome,
        change_points=found.change_points,
        opened=found.opened,
        closed=found.closed,
        bisections=tuple(bisections),
        notices=tuple(notices),
        report=str(report) if report else None,
        problems=tuple(problems),
    )
    create_markdown_artifact(summary.markdown(), key=artifact_key("nightly", repo.name, pool))
    return summary
