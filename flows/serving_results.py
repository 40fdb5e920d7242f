"""Serving results in, judged: the files a serving benchmark job drops in a folder ingested
(``serving_ingest``, a Prefect flow the configured deployment runs on a schedule), and every
deployment's history judged, opening serving regressions (``judge_deployments``, which
``kernelwatch serving detect`` and the demo run too).

A bad file is one line of the flow's log; the other files are stored and judged, and then
the flow run fails, naming it. Files stay where the job wrote them: ingesting one again
stores nothing (its runs are keyed by content), so the folder is read whole each time. A
file here must name its deployment itself (vLLM's ``--metadata deployment=... gpu=...``):
no command line gives it one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from prefect import flow, get_run_logger

from kernelwatch.analysis.thresholds import DetectorConfig
from kernelwatch.serving.explain import Explanation, explain
from kernelwatch.serving.formats import Given, ServingFileError, read_file
from kernelwatch.serving.judge import ServingChange, changes, findings
from kernelwatch.serving.names import Match, match
from kernelwatch.serving.results import JUDGED
from kernelwatch.serving.traces import TraceProfile
from kernelwatch.store import serving as store

ACTOR = "kernelwatch"
#: The files a serving benchmark writes: vLLM's JSON (and its PyTorch-format sidecar),
#: SGLang's and vLLM's appended JSON lines.
SUFFIXES = (".json", ".jsonl")


@dataclass(frozen=True)
class JudgedDeployment:
    """One deployment's judgement: every change found, and what storing them did."""

    deployment: str
    changes: tuple[ServingChange, ...]
    recorded: store.Recorded


def judge_deployments(
    conn: psycopg.Connection,
    config: DetectorConfig,
    names: Sequence[str] | None = None,
) -> list[JudgedDeployment]:
    """Judge the stored history of each deployment (those ``names``, or all) on every
    judged metric; store the changes and open a serving regression per run that made any
    metric worse (serving/judge.py). Judging again opens nothing twice."""
    judged = []
    for deployment_id, deployment in store.deployments(conn):
        if names is not None and deployment.name not in names:
            continue
        found = [
            change
            for metric in JUDGED
            for change in changes(store.history(conn, deployment_id, metric), metric, config)
        ]
        recorded = store.record(conn, deployment_id, found, findings(deployment.name, found),
                                ACTOR)  # fmt: skip
        # Kept on each change, so the dashboard, the alert and `regressions show` say it;
        # recomputed each time, as a trace or a nightly may arrive after the change.
        for run_pk in store.traced_runs_around_changes(conn, deployment_id):
            explained = explain_run(conn, run_pk)
            for change, e in explained.explained if explained else ():
                store.save_explanation(conn, change.change_id, e.explained_pct, e.sentence())
        judged.append(JudgedDeployment(deployment.name, tuple(found), recorded))
    return judged


@dataclass(frozen=True)
class RunExplanation:
    """A traced run's step: its kernels matched in ``repository``, and for each worse
    change of a serving regression that ends at it or starts after it, what its kernels
    explain; ``unexplainable``: regressions whose kernel commits kernelwatch never measured
    in that repository."""

    run_pk: int
    profile: TraceProfile
    repository: str | None
    matches: tuple[Match, ...]
    explained: tuple[tuple[store.RunChange, Explanation], ...]
    unexplainable: tuple[int, ...]


def explain_run(
    conn: psycopg.Connection, run_pk: int, repository: str | None = None
) -> RunExplanation | None:
    """``run_pk``'s explanation (None: it has no trace); names are matched in
    ``repository``, by default the one whose commit the run served."""
    profile = store.trace(conn, run_pk)
    if profile is None:
        return None
    repo = repository or store.run_repository(conn, run_pk)
    matches = tuple(match(profile.kernels, store.known_kernels(conn, repo) if repo else []))
    explained = []
    unexplainable: set[int] = set()
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    for c in store.changes_around(conn, run_pk):
        if not (repo and c.before and c.after):
            unexplainable.add(c.regression_id)
            continue
        key = (c.before, c.after)
        if key not in ratios:
            ratios[key] = store.kernel_ratios(conn, repo, c.before, c.after, c.gpu)
        e = explain(c.metric, 100 * c.rel_change, matches, ratios[key], c.trace_after)
        explained.append((c, e))
    return RunExplanation(run_pk, profile, repo, matches, tuple(explained),
                          tuple(sorted(unexplainable)))  # fmt: skip


@dataclass(frozen=True)
class FolderIngest:
    """What ingesting a folder did: runs newly stored and already stored, the deployments
    that got a new run, and one line per file that could not be read."""

    stored: int = 0
    already: int = 0
    deployments: tuple[str, ...] = ()
    bad: tuple[str, ...] = ()


def ingest_folder(conn: psycopg.Connection, folder: Path) -> FolderIngest:
    """Store the runs of every result file in ``folder`` (not its subfolders), in name
    order; a file that cannot be read is a line of ``bad``, never the end of the batch."""
    if not folder.is_dir():
        raise ServingFileError(f"{folder}: no such folder; set [serving] folder to where the "
                               "serving benchmark job writes its results")  # fmt: skip
    stored = already = 0
    touched: set[str] = set()
    bad = []
    for path in sorted(p for p in folder.iterdir() if p.suffix in SUFFIXES and p.is_file()):
        try:
            runs = read_file(path, Given())
        except ServingFileError as exc:
            bad.append(str(exc))
            continue
        for run in runs:
            if store.ingest(conn, run).stored:
                stored += 1
                touched.add(run.deployment.name)
            else:
                already += 1
    return FolderIngest(stored, already, tuple(sorted(touched)), tuple(bad))


@dataclass(frozen=True)
class ServingIngestSummary:
    """The flow's outcome: the folder's ingest, and the serving regressions it opened."""

    ingested: FolderIngest
    opened: tuple[int, ...] = ()
    changes: tuple[str, ...] = field(default=())


@flow(name="serving-ingest")
def serving_ingest(folder: str | None = None) -> ServingIngestSummary:
    """Ingest the result files in ``folder`` (default: kernelwatch.toml's [serving] folder)
    and judge the deployments that got a new run."""
    from kernelwatch.config.settings import load
    from kernelwatch.flows.tasks import store_connection

    config = load()
    where = Path(folder or config.serving.folder).expanduser()
    logger = get_run_logger()
    with store_connection() as conn:
        ingested = ingest_folder(conn, where)
        for line in ingested.bad:
            logger.error(line)
        judged = judge_deployments(conn, config.thresholds.detection, ingested.deployments)
    opened = tuple(r for j in judged for r in j.recorded.opened)
    lines = tuple(
        f"{j.deployment}: {c.metric} {c.magnitude_pct:+.1f}% {c.direction} at kernel "
        f"{c.run.kernel_commit[:12]}"
        for j in judged
        for c in j.changes
    )
    logger.info(
        f"serving: {ingested.stored} run(s) stored, {ingested.already} already stored, "
        f"{len(ingested.bad)} bad file(s); {len(opened)} serving regression(s) opened"
    )
    if ingested.bad:
        # Everything else is stored and judged; the run fails so that someone looks.
        raise ServingFileError(
            f"{len(ingested.bad)} file(s) in {where} could not be read (the others are stored): "
            + ingested.bad[0]
        )
    return ServingIngestSummary(ingested, opened, lines)
