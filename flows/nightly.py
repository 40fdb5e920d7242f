"""The nightly flow: the tracked branch's head on one pool's device; the same night, what it
suspects confirmed by A/B against the previous nightly head on this device (``confirmation.py``:
timing, correctness and static regressions opened the night they land); detection over the
stored history as the long-horizon net; one alert per culprit, automatic bisection of what
was opened, notifications and the report.

Deployed once per GPU pool (``prefect.yaml``), run locally by ``kernelwatch nightly``.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from kernelwatch.analysis.aa_rate import AARate
from kernelwatch.config import settings as configuration
from kernelwatch.flows import tasks
from kernelwatch.flows.bisection import BisectSummary, bisect, more_samples
from kernelwatch.flows.commit_run import CommitOutcome, run_commit
from kernelwatch.flows.confirmation import OUTCOMES, NightReport, night_pass
from kernelwatch.flows.notify import RegressionNotice, send
from kernelwatch.flows.pipeline import RunContext, total
from kernelwatch.flows.reporting import artifact_key, nightly_report, regression_notices
from kernelwatch.harness.isolation.worktree import checkout, resolve
from kernelwatch.harness.records import ABMeasurement, StageTime
from kernelwatch.store.device_time import add_stage
from kernelwatch.store.series_history import UnjudgedNights

#: Regression kinds the nightly bisects (a static one is the night's own range: its builds
#: are the evidence).
BISECTED = ("timing", "correctness")


@dataclass(frozen=True)
class NightlySummary:
    """What one nightly did: the commit's outcome, the same-night confirmation of what it
    suspected (``night``), the detection pass, every regression opened (confirmed ones
    first), the bisections it started, the report's path, any notification that could
    not be delivered, and the A/B rule's false-alarm rate measured on A/A pairs."""

    repository: str
    pool: str
    commit: CommitOutcome
    change_points: int
    opened: tuple[int, ...]
    closed: tuple[int, ...]
    night: NightReport = field(default_factory=NightReport)
    bisections: tuple[BisectSummary, ...] = ()
    notices: tuple[RegressionNotice, ...] = ()
    report: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)
    aa: tuple[AARate, ...] = ()
    unjudged: tuple[UnjudgedNights, ...] = ()

    def markdown(self) -> str:
        """The flow's artifact: a few lines a person reads on the flow run's page."""
        c = self.commit
        lines = [
            f"# nightly: {self.repository} on {self.pool}",
            f"- commit `{c.sha[:12]}`: **{c.status}**, {c.cases} cases checked, "
            f"{c.measured} timed" + (f"; error: {c.error}" if c.error else ""),
        ]
        lines += [f"  - `{k}` failed: {reason}" for k, reason in sorted(c.failed.items())]
        if c.untimed:
            lines.append(f"  - {c.untimed}")
        lines += self.unjudged_lines()
        lines += self.night_lines()
        lines.append(
            f"- detection: {self.change_points} new change points, "
            f"{len(self.opened)} regressions opened, {len(self.closed)} closed"
        )
        for rate in self.aa:
            flag = " **flagged: above the rule's stated rate**" if rate.flagged else ""
            where = f"{rate.pool} / {rate.device_model}" if rate.device_model else rate.pool
            lines.append(
                f"- A/A false alarms on {where}: {rate.different} of {rate.pairs} identical "
                f"builds called different ({rate.rate:.2%}; stated {rate.stated:.2%}){flag}"
            )
        for b in self.bisections:
            lines.append(f"- bisection of #{b.regression_id}: {b.line()}")
        if self.report:
            lines.append(f"- report: `{self.report}`")
        lines += [f"- problem: {p}" for p in self.problems]
        return "\n".join(lines) + "\n"

    def unjudged_lines(self) -> list[str]:
        """Each kernel stored unjudged tonight, with how many recent nights it was."""
        return [
            f"- {u.kernel}: {u.nights} of the last {u.of_nights} nights unjudged, CI up to "
            f"±{u.widest:.0%} (wider than the margin it is judged by after a second "
            "measurement; kept out of its level)"
            for u in self.unjudged
        ]

    def night_lines(self) -> list[str]:
        """The same-night pass in a few lines: the count per outcome, then each suspect
        that did not settle tonight (unconfirmed, waiting) and each regression opened."""
        night = self.night
        if not night.suspects:
            return ["- suspicion: nothing suspected tonight"]
        counts = ", ".join(
            f"{sum(s.outcome == o for s in night.suspects)} {o.replace('_', ' ')}"
            for o in OUTCOMES
            if any(s.outcome == o for s in night.suspects)
        )
        lines = [
            f"- suspicion: {len(night.suspects)} suspects ({counts}); "
            f"{night.gpu_seconds:.1f} s of A/B"
        ]
        for s in night.suspects:
            if s.outcome in ("unconfirmed", "waiting") or s.regression_id is not None:
                opened = f" (regression #{s.regression_id})" if s.regression_id else ""
                lines.append(f"  - {s.outcome}: {s.kind} {s.what}{opened}: {s.note}")
        return lines


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
    night = confirm_tonight(config, repo, path, outcome)
    unjudged: list[UnjudgedNights] = []
    if outcome.unjudged and outcome.spooled is None:
        kernels = tuple(dict.fromkeys(kernel for kernel, _ in outcome.unjudged))
        unjudged = tasks.unjudged_nights(
            repo.name, pool, kernels, config.thresholds.confirm.history
        )
    found = tasks.detect(repo.name, config.thresholds)
    opened = (*(i for i, _ in night.opened), *found.opened)
    bisected = (*(i for i, kind in night.opened if kind in BISECTED), *found.opened)
    bisections: list[BisectSummary] = []
    problems: list[str] = []
    if config.bisect.auto:
        for regression_id in bisected:
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
    notices = regression_notices(opened, report, config.notifications)
    if config.notifications.announced_by == "flow":  # else Grafana's rule announces them
        problems += send(notices, config.notifications)
    summary = NightlySummary(
        repository=repo.name,
        pool=pool,
        commit=outcome,
        change_points=found.change_points,
        opened=opened,
        closed=found.closed,
        night=night,
        bisections=tuple(bisections),
        notices=tuple(notices),
        report=str(report) if report else None,
        problems=tuple(problems),
        aa=found.aa,
        unjudged=tuple(unjudged),
    )
    create_markdown_artifact(summary.markdown(), key=artifact_key("nightly", repo.name, pool))
    return summary


def confirm_tonight(
    config: configuration.Config,
    repo: configuration.RepositoryConfig,
    path: Path,
    outcome: CommitOutcome,
) -> NightReport:
    """The same-night pass over tonight's stored run: each A/B it asks for runs on this
    device, the suspected night's base commit (A) against tonight's head (B), each checked
    out once. Nothing when the run was not stored (failed or spooled)."""
    if outcome.run_id is None or outcome.spooled is not None:
        return NightReport()
    timeout = config.run.case_timeout_s
    with ExitStack() as trees:
        head = trees.enter_context(checkout(path, outcome.sha)).path
        bases: dict[str, Path] = {}

        spent: list[StageTime] = []

        def measure(base: str, kernels: tuple[str, ...], round_: int) -> list[ABMeasurement]:
            if base not in bases:
                bases[base] = trees.enter_context(checkout(path, base)).path
            options = more_samples(config.bench, round_)
            timed = tasks.ab(repo, bases[base], head, kernels, options, timeout)
            spent.append(timed.time)
            return timed.records

        with tasks.store_connection() as conn:
            report = night_pass(conn, outcome.run_id, config.thresholds, config.confirm, measure)
            ab = total("ab", spent)
            if ab is not None:
                add_stage(conn, outcome.run_id, ab)
            return report
