"""The pull-request flow: base and head built, checked and timed interleaved on one device;
a verdict per case, the static diff, a markdown comment and an HTML report.

Only the kernels a change can reach are timed: a kernel all of whose cases have the same
build identity at base and head (the same code, launches and inputs:
``analysis/build_identity.py``) is reported "identical build: not timed", and a head that
changes no kernel says "no kernel changed" without timing anything; ``every_case`` times
everything. Correctness is checked on every case of both sides either way.

Before it answers, the kernels of the cases the A/B left AMBIGUOUS are timed again with twice
the samples each round, a static change first, within ``[pr]``'s device seconds and rounds
(``analysis/settling.py``).

Result: 0 no regression, 1 regression (a case SLOWER beyond the margin, a static
regression, or a case that fails its check at head and did not at base), 2 the check itself
could not be made (a suite the check, the build or the A/B stage cannot load), 3 no
regression found but a case still inconclusive. Deployed per pool (``prefect.yaml``), run
locally by ``kernelwatch pr-check``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact

from kernelwatch.analysis.build_identity import CaseKey, case_key, identical
from kernelwatch.analysis.settling import settle
from kernelwatch.analysis.static_diff import diff_builds, paired_builds
from kernelwatch.config import settings as configuration
from kernelwatch.flows import pipeline, tasks
from kernelwatch.flows.bisection import more_samples
from kernelwatch.flows.reporting import artifact_key, report_url
from kernelwatch.flows.repos import commit_info, declared_environment, revision
from kernelwatch.harness.build.stage import BuildFailed
from kernelwatch.harness.isolation.supervise import SelectionUnavailable, SuiteError
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.records import ABMeasurement, BuildMetrics, CaseId
from kernelwatch.report import signature
from kernelwatch.report.compare import comparison_from_runs, pr_findings
from kernelwatch.report.html import write_compare_report
from kernelwatch.report.markdown import device_line, error_comment, merge_verdict, pr_comment
from kernelwatch.report.repro import repository_sources
from kernelwatch.store.pr_findings import PrCheck, insert_pr_check

NO_REGRESSION, REGRESSION, ERROR, INCONCLUSIVE = 0, 1, 2, 3


@dataclass(frozen=True)
class PrCheckSummary:
    """The outcome (0/1/2/3), the comment's verdict in words, the files written for people,
    and why when it is 2."""

    repository: str
    base: str
    head: str
    outcome: int
    comment: str | None = None
    report: str | None = None
    error: str | None = None
    verdict: str = ""


@flow(name="pr_check")
def pr_check(
    base: str,
    head: str,
    repository: str | None = None,
    pool: str = configuration.LOCAL_POOL,
    out_dir: str | None = None,
    pr_number: int | None = None,
    branch: str = "",
    author: str = "",
    kernels: list[str] | None = None,
    workload: str | None = None,
    dtypes: list[str] | None = None,
    params: list[str] | None = None,
    nonce: str = "",
    github_repository: str = "",
    every_case: bool = False,
) -> PrCheckSummary:
    """Compare ``head`` against ``base`` of ``repository`` on this worker's device.
    ``pr_number``, ``branch`` and ``author`` name the pull request on the PR dashboard;
    ``kernels``, ``workload``, ``dtypes`` and ``params`` (``KEY=VALUE``) narrow the
    repository's selection (a regression's repro command pins its one case that way).
    ``nonce`` and ``github_repository`` (``owner/name``) come from the workflow run that
    started this flow: the comment's signature names them, with ``pr_number``
    (``report/signature.py``)."""
    config = configuration.load()
    repo = _narrowed(config.repository(repository), kernels, workload, dtypes, params)
    config.pool(pool)
    path = tasks.sync_repository(repo)
    base_sha, head_sha = revision(path, base), revision(path, head)
    to = signature.Addressee(github_repository or repo.name, pr_number, nonce, base_sha, head_sha)
    out = Path(out_dir or Path(config.run.report_dir) / f"pr-{base_sha[:8]}-{head_sha[:8]}")
    context = pipeline.RunContext("pr", repo.name, pool, tasks.flow_run_id())
    started = pipeline.now()
    timeout = config.run.case_timeout_s
    with checkout(path, base_sha) as a, checkout(path, head_sha) as b:
        try:
            checked_a = tasks.check(repo, a.path, timeout)
            checked_b = tasks.check(repo, b.path, timeout)
            checks_a, checks_b = checked_a.records, checked_b.records
            built_a = tasks.build(repo, base_sha, a.path, pipeline.buildable_kernels(checks_a),
                                  trusted=False, every_dtype=True)  # fmt: skip
            built_b = tasks.build(repo, head_sha, b.path, pipeline.buildable_kernels(checks_b),
                                  trusted=False, every_dtype=True)  # fmt: skip
            builds_a, builds_b = built_a.records, built_b.records
            passed_a = set(pipeline.timed_kernels(checks_a))
            passed = tuple(k for k in pipeline.timed_kernels(checks_b) if k in passed_a)
            declared_a = declared_environment(path, base_sha, repo.environment_files)
            declared_b = declared_environment(path, head_sha, repo.environment_files)
            ids_a = pipeline.case_identities(repo, built_a, declared_a)
            ids_b = pipeline.case_identities(repo, built_b, declared_b)
            same = frozenset() if every_case else identical(ids_a, ids_b)
            kernels = changed(passed, [c.case for c in checks_b], same)
            gpus = config.pool(pool).gpus_per_node
            first = tasks.ab(repo, a.path, b.path, kernels, config.bench, timeout, gpus)
            pairs, spent = first.records, [first.time]

            def measure(chosen: tuple[str, ...], round_: int) -> list[ABMeasurement]:
                options = more_samples(config.bench, round_)
                again = tasks.ab(repo, a.path, b.path, chosen, options, timeout, gpus)
                spent.append(again.time)
                return again.records

            settled = settle(pairs, measure, config.thresholds, config.pr.device_seconds,
                             config.pr.max_rounds, changed_kernels(builds_a, builds_b))  # fmt: skip
            pairs = list(settled.pairs)
        except (BuildFailed, SuiteError, SelectionUnavailable) as exc:
            return _error(repo.name, to, str(exc))
    side_a, side_b = pipeline.split_ab(pairs)
    side_a, side_b = pipeline.identified(side_a, ids_a), pipeline.identified(side_b, ids_b)
    run_a = pipeline.assemble(
        context,
        commit_info(path, base_sha),
        [*builds_a, *checks_a, *side_a],
        started,
        stages=(checked_a.time,),
    )
    # The A/B holds the device for both sides at once: its time is the head's run's, as the
    # check is (pr_checks is keyed by it).
    run_b = pipeline.assemble(
        context,
        commit_info(path, head_sha),
        [*builds_b, *checks_b, *side_b],
        started,
        base_commit=base_sha,
        stages=(checked_b.time, pipeline.total("ab", spent)),
    )
    if run_a is None or run_b is None:
        return _error(repo.name, to, "no case ran at base or head")
    for run in (run_a, run_b):
        if tasks.store(run).spooled is not None:
            return _error(repo.name, to, "the store is unreachable; the runs were spooled")
    with tasks.store_connection() as conn:
        comparison = comparison_from_runs(
            conn, run_a.info.run_id, run_b.info.run_id, config.thresholds, same
        )
        notes = (*comparison.notes, *declared_note(declared_a, declared_b), *settled.notes())
        comparison = replace(comparison, notes=notes)
        report = write_compare_report(conn, comparison, out, sources=repository_sources(config))
        link = report_url(report, Path(config.run.report_dir), config.run.report_url)
        check = PrCheck(comparison.outcome, merge_verdict(comparison), link, pr_number,
                        branch, author)  # fmt: skip
        insert_pr_check(conn, run_b.info.run_id, run_a.info.run_id, check, pr_findings(comparison))
    comment = out / "pr-comment.md"
    held_s = sum(t.device_s for r in (run_a, run_b) for t in r.info.stages)
    price = config.cost.of(pool).gpu_hour
    device = device_line(held_s, pool, gpus, price, config.cost.currency)
    markdown = pr_comment(comparison, report_link=link, device=device)
    comment.write_text(markdown)
    _publish(markdown, repo.name, to)
    return PrCheckSummary(repo.name, base_sha, head_sha, comparison.outcome, str(comment),
                          str(report), verdict=check.verdict)  # fmt: skip


def changed(
    kernels: Sequence[str], cases: Iterable[CaseId], same: frozenset[CaseKey]
) -> tuple[str, ...]:
    """The ``kernels`` to time: those with a case in ``cases`` (the head's checked cases)
    whose build is not known to be identical (a kernel is timed whole: any of its cases may
    be the one that changed)."""
    reached = {c.kernel for c in cases if case_key(c.kernel, c.dtype, c.params) not in same}
    return tuple(k for k in kernels if k in reached)


def declared_note(base: Mapping[str, str], head: Mapping[str, str]) -> tuple[str, ...]:
    """What the comment says when the head changes the environment its repository declares
    (``flows.repos.declared_environment``): the check ran both sides on the worker's own."""
    moved = sorted(key.split(":", 1)[1] for key in base.keys() | head.keys()
                   if base.get(key) != head.get(key))  # fmt: skip
    if not moved:
        return ()
    own = ", ".join(f"{name} {metadata.version(name)}" for name in ("triton", "torch"))
    return (
        f"The head changes the environment its repository declares ({', '.join(moved)}). "
        f"Both sides ran on this worker's ({own}), so every case it reaches was timed, but "
        "what the new environment does is measured only where it is installed (a nightly "
        "on an image with it).",
    )


def changed_kernels(base: Sequence[BuildMetrics], head: Sequence[BuildMetrics]) -> frozenset[str]:
    """The kernels a static regression or a changed cubin touched between ``base`` and
    ``head``'s builds: the ones an inconclusive case of is settled first."""
    pairs = paired_builds(base, head)
    moved = {after.kernel for before, after in pairs if before.cubin_sha256 != after.cubin_sha256}
    return frozenset(moved | {f.kernel for f in diff_builds(base, head)})


def _narrowed(
    repo: configuration.RepositoryConfig,
    kernels: list[str] | None,
    workload: str | None,
    dtypes: list[str] | None,
    params: list[str] | None = None,
) -> configuration.RepositoryConfig:
    """``repo`` with its selection narrowed where one is given (checked, built and timed
    alike; a name the suite lacks ends the check with outcome 2, saying so)."""
    return replace(
        repo,
        kernels=tuple(kernels) if kernels else repo.kernels,
        workload=workload or repo.workload,
        build_workload=repo.build_workload if workload is None else workload,
        dtypes=tuple(dtypes) if dtypes else repo.dtypes,
        params=tuple(params) if params else repo.params,
    )


def _error(repository: str, to: signature.Addressee, message: str) -> PrCheckSummary:
    _publish(error_comment(message), repository, to)
    return PrCheckSummary(repository, to.base, to.head, ERROR, error=message)


def _publish(markdown: str, repository: str, to: signature.Addressee) -> None:
    """The comment as the artifact the workflow posts, signed ``to`` its run with the
    verdict key when this reporter holds one (``report/signature.py``): the workflow posts
    nothing else."""
    key = os.environ.get(signature.KEY_ENV)
    if key:
        markdown = signature.sign(markdown, key, to)
    create_markdown_artifact(markdown, key=artifact_key("pr-check", repository, to.head[:12]))
