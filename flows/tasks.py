"""Prefect tasks: the pipeline stages (``pipeline.py``) with orchestration attached.

- Retries are for infrastructure only (git, the database, the disk): a kernel's failure is
  a result and a regression is a finding, and re-running either until it goes away would
  hide exactly what kernelwatch exists to show.
- The build is cached by commit, suite, targets and toolchain: a commit built once (by a
  nightly or a bisection) is not built again; below that, the build cache skips unchanged
  kernels by their source hash. A pull request's builds are cached apart and never written
  to the build cache (docs/SECURITY.md). Cached results are JSON, never pickles.
- Timing holds a global concurrency slot per GPU it uses (a multi-GPU pool's run: every
  GPU of the node), so two benchmarks never share a GPU, whatever the pools and schedules
  say.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from importlib.metadata import version
from pathlib import Path
from typing import Any

import psycopg
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.context import TaskRunContext
from prefect.runtime import flow_run

from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.config.settings import RepositoryConfig, load
from kernelwatch.flows import pipeline
from kernelwatch.flows.detection import PassReport, detect_and_alert
from kernelwatch.flows.repos import InfrastructureError, sync
from kernelwatch.harness.build.stage import BuildResult
from kernelwatch.harness.records import (
    ABMeasurement,
    BuildMetrics,
    CaseRecipe,
    CorrectnessResult,
    Measurement,
)
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.timers import HARNESS_VERSION
from kernelwatch.store.connect import StoreUnavailable, UnparsableURL, connect, resolve
from kernelwatch.store.runfile import Run
from kernelwatch.store.series_history import UnjudgedNights
from kernelwatch.store.series_history import unjudged_nights as unjudged_history
from kernelwatch.store.spool import Submitted, Submitter

#: Exceptions a retry can cure.
INFRASTRUCTURE = (InfrastructureError, StoreUnavailable, psycopg.OperationalError, OSError)
_RETRY: dict[str, Any] = {"retries": 2, "retry_delay_seconds": 20}
# Only the build is worth caching; hashing the other tasks' inputs (whole runs) would cost
# time for nothing.
_UNCACHED: dict[str, Any] = {"cache_policy": NO_CACHE}


def infrastructure_only(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: retry a task only when it failed for an infrastructure
    reason (see :data:`INFRASTRUCTURE`)."""
    try:
        state.result()
    except UnparsableURL:
        return False  # the configuration's mistake: retrying it only delays the one line
    except INFRASTRUCTURE:
        return True
    except Exception:
        return False
    return False


def flow_run_id() -> str | None:
    """The Prefect flow run this code runs in, kept in each run's provenance."""
    run_id = flow_run.id
    return str(run_id) if run_id else None


def device_slot_names(gpus: int = 1) -> list[str]:
    """The concurrency limits guarding the GPUs a run times on: one per GPU of this host. A
    worker pinned by CUDA_VISIBLE_DEVICES holds its GPUs' slots; otherwise a run holds the
    first ``gpus`` (the pool's ``gpus_per_node``: a multi-GPU pool's run takes the whole
    node), so no single-GPU worker of the same host times beside it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    gpu_ids = visible.split(",") if visible else [str(i) for i in range(gpus)]
    host = socket.gethostname()
    return [re.sub(r"[^A-Za-z0-9_.-]", "_", f"device-{host}-gpu{g.strip()}") for g in gpu_ids]


@contextmanager
def device_slot(gpus: int = 1) -> Iterator[None]:
    """Hold the slots of every GPU the run uses while timing (each limit is created on
    first use); all of them or none, so two multi-GPU runs never deadlock."""
    names = device_slot_names(gpus)
    with get_client(sync_client=True) as client:
        for name in names:
            client.upsert_global_concurrency_limit_by_name(name, 1)
    with concurrency(names, occupy=1, strict=True, lease_duration=600):
        yield


def _build_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    repo: RepositoryConfig = parameters["repo"]
    parts = (
        "trusted" if parameters["trusted"] else "untrusted",
        repo.name,
        parameters["sha"],
        repo.suite,
        repo.src,
        ",".join(repo.archs),
        ",".join(parameters["kernels"]),
        ",".join(repo.dtypes),
        repo.build_workload or repo.workload,
        "every-dtype" if parameters.get("every_dtype") else "served-dtypes",
        f"h{HARNESS_VERSION}",
        f"triton{version('triton')}",
    )
    return "build-" + "-".join(parts)


@task(
    name="sync-repository",
    **_UNCACHED,
    retry_condition_fn=infrastructure_only,
    **_RETRY,
)
def sync_repository(repo: RepositoryConfig) -> Path:
    """The repository's local checkout, fetched if it is remote."""
    return sync(repo)


# Stored as JSON, never pickled: a result file someone managed to plant or change is read
# as data, not executed when a later run loads it.
@task(
    name="build",
    cache_key_fn=_build_key,
    cache_expiration=timedelta(days=90),
    persist_result=True,
    result_serializer="json",
    retry_condition_fn=infrastructure_only,
    **_RETRY,
)
def _build(
    repo: RepositoryConfig,
    sha: str,
    checkout: Path,
    kernels: tuple[str, ...],
    trusted: bool,
    every_dtype: bool = False,
) -> list[dict[str, Any]]:
    built = pipeline.build_stage(repo, checkout, kernels, trusted, every_dtype)
    return [r.to_json() for r in (*built.records, *built.recipes)]


def build(
    repo: RepositoryConfig,
    sha: str,
    checkout: Path,
    kernels: tuple[str, ...],
    trusted: bool = True,
    every_dtype: bool = False,
) -> BuildResult:
    """Cross-compile one commit's ``kernels`` for the repository's archs, with each case's
    recipe (with ``every_dtype``, also of the dtypes the timing stage runs but the build
    does not compile). A commit nobody has
    reviewed (a pull request's, ``trusted`` False) reads the caches but adds nothing to the
    ones nightly runs reuse."""
    stored = _build(repo, sha, checkout, kernels, trusted, every_dtype)
    records = [BuildMetrics.from_json(r) for r in stored if r.get("kind") == BuildMetrics.KIND]
    recipes = [CaseRecipe.from_json(r) for r in stored if r.get("kind") == CaseRecipe.KIND]
    return BuildResult(repo.name, records, recipes)


@task(name="check", **_UNCACHED)
def check(
    repo: RepositoryConfig,
    checkout: Path,
    case_timeout_s: float,
    kernels: tuple[str, ...] = (),
    stage: str = "check",
) -> pipeline.Timed[CorrectnessResult]:
    """Check one commit's kernels against their references (a bisection's probe names its
    ``stage``)."""
    return pipeline.timed(
        stage, lambda: pipeline.check_stage(repo, checkout, case_timeout_s, kernels)
    )


@task(name="bench", **_UNCACHED)
def bench(
    repo: RepositoryConfig,
    checkout: Path,
    kernels: tuple[str, ...],
    options: BenchOptions,
    case_timeout_s: float,
    gpus: int = 1,
    budget_s: float | None = None,
) -> pipeline.Timed[Measurement]:
    """Time one commit's kernels, alone on the device (on ``gpus`` GPUs, all of them), within
    ``budget_s`` device seconds (None: all of them); its device time counts from the moment
    it holds the device. What the budget left untimed is the result's ``untimed``."""
    planned: list[int] = []
    with device_slot(gpus):
        timed = pipeline.timed(
            "bench",
            lambda: pipeline.bench_stage(
                repo, checkout, kernels, options, case_timeout_s, budget_s, planned.append
            ),
        )
    note = pipeline.untimed_by_budget(kernels, timed.records, sum(planned), budget_s)
    return dataclasses.replace(timed, untimed=note)


@task(name="ab", **_UNCACHED)
def ab(
    repo: RepositoryConfig,
    base: Path,
    head: Path,
    kernels: tuple[str, ...] | None,
    options: BenchOptions,
    case_timeout_s: float,
    gpus: int = 1,
    stage: str = "ab",
) -> pipeline.Timed[ABMeasurement]:
    """Time two commits' kernels (None: the repository's selection) interleaved, alone on
    the device (on ``gpus`` GPUs, all of them); a bisection's probe names its ``stage``."""
    with device_slot(gpus):
        return pipeline.timed(
            stage, lambda: pipeline.ab_stage(repo, base, head, kernels, options, case_timeout_s)
        )


@task(name="store", **_UNCACHED, retry_condition_fn=infrastructure_only, **_RETRY)
def store(run: Run) -> Submitted:
    """Ingest a run; if the database cannot be reached it is spooled for `db replay`."""
    submitter = Submitter()
    try:
        return submitter.submit(run)
    finally:
        submitter.close()


@task(name="detect", **_UNCACHED, retry_condition_fn=infrastructure_only, **_RETRY)
def detect(repository: str, thresholds: Thresholds) -> PassReport:
    """One detection pass over the repository's stored history."""
    with store_connection() as conn:
        return detect_and_alert(conn, repository, thresholds)


@task(name="unjudged-nights", **_UNCACHED, retry_condition_fn=infrastructure_only, **_RETRY)
def unjudged_nights(
    repository: str, pool: str, kernels: tuple[str, ...], nights: int
) -> list[UnjudgedNights]:
    """How many of the repository's last ``nights`` nights on ``pool`` left each of
    ``kernels`` unjudged (``store/series_history.py``)."""
    with store_connection() as conn:
        return unjudged_history(conn, repository, pool, list(kernels), nights)


def store_connection() -> psycopg.Connection:
    """A connection to the configured store (the embedded server is started if it is the
    one in use); raises StoreUnavailable or SchemaMismatch."""
    return connect(resolve(load().database).url)
