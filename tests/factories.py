"""Builders of harness records and runs for tests: one default for every record, any field
overridable by keyword.

Tests ask for them as fixtures (pytest's factories-as-fixtures pattern, registered by
``conftest.py``): ``def test_x(make_measurement): make_measurement(samples_ns=..., status=...)``.
Module-level helpers and module-scoped fixtures, which cannot take a function-scoped fixture,
import the builders themselves: ``from factories import measurement``.

The defaults describe one plausible run on an H200: an ``ok`` rms_norm case timed with CUDA
events, unthrottled at 1980 MHz, checked and built. The synthetic fleet for the store (many
devices, series and nights) is ``synthetic_fleet.py``, beside this module.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
import pytest

from kernelwatch.harness.records import (
    BuildMetrics,
    CaseId,
    CommitInfo,
    CorrectnessResult,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    Method,
    RunInfo,
    SoftwareInfo,
    Summary,
    Verdict,
)
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run, RunRecord

DEVICE = DeviceInfo("cuda", "NVIDIA H200", "node-1", False, "GPU-1", "9.0", 132)
SOFTWARE = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.1")
METHOD = Method("cuda-events", "cold", 1)
CONFIG = LaunchConfig({"BLOCK": 1024}, 4, 1)
CASE = CaseId("builtin", "rms_norm", "llm", {"rows": 64, "hidden": 4096}, "fp16")
REPOSITORY = "kernels-repo"
WHEN = datetime(2026, 6, 1, tzinfo=UTC)
CLOCK_MHZ = 1980.0


def summary(samples_ns: Sequence[float]) -> Summary:
    """The statistic of a run that converged on ``samples_ns``, with a CI of +-0.2 %."""
    times = np.asarray(samples_ns, dtype=float)
    median = float(np.median(times))
    p10, p90 = (float(p) for p in np.percentile(times, [10, 90]))
    return Summary(
        n=times.size,
        median_ns=median,
        ci_low_ns=median * 0.998,
        ci_high_ns=median * 1.002,
        mean_ns=float(times.mean()),
        min_ns=float(times.min()),
        p10_ns=p10,
        p90_ns=p90,
        stop="converged",
        rel_ci_halfwidth=0.002,
    )


def measurement(
    case: CaseId = CASE, samples_ns: Sequence[float] = (1000.0, 1010.0, 990.0), **fields: Any
) -> Measurement:
    """An ``ok`` measurement of ``case`` from ``samples_ns``: every sample unthrottled at
    1980 MHz and the summary computed from them (none without samples)."""
    n = len(samples_ns)
    defaults: dict[str, Any] = {
        "status": "ok",
        "reason": "",
        "method": METHOD,
        "device": DEVICE,
        "software": SOFTWARE,
        "config": CONFIG,
        "samples_ns": tuple(float(s) for s in samples_ns),
        "sm_clock_mhz": (CLOCK_MHZ,) * n,
        "throttled": (False,) * n,
        "summary": summary(samples_ns) if n else None,
    }
    return Measurement(case=case, **{**defaults, **fields})


def correctness(case: CaseId = CASE, verdict: Verdict = "pass", **fields: Any) -> CorrectnessResult:
    """A check of ``case`` that gave ``verdict``; pass a ``reason`` with any other verdict."""
    defaults: dict[str, Any] = {
        "reason": "",
        "tolerance": 1e-2,
        "seed": 0,
        "device": DEVICE,
        "software": SOFTWARE,
        "rel_error": 3e-4,
        "max_abs_error": 2e-3,
        "deterministic": True,
        "config": CONFIG,
    }
    return CorrectnessResult(case=case, verdict=verdict, **{**defaults, **fields})


def build(**fields: Any) -> BuildMetrics:
    """A clean sm_90a build of the default case's kernel: no spills, no tensor cores."""
    defaults: dict[str, Any] = {
        "suite": CASE.suite,
        "kernel": CASE.kernel,
        "function": f"{CASE.kernel}_fwd",
        "language": "triton",
        "arch": "sm_90a",
        "config": CONFIG,
        "status": "ok",
        "registers": 40,
        "spill_store_bytes": 0,
        "spill_load_bytes": 0,
        "shared_static_bytes": 0,
        "shared_dynamic_bytes": 0,
        "num_warps": CONFIG.num_warps,
        "num_stages": CONFIG.num_stages,
        "tensor_core": "none",
        "global_load_bits": 128,
        "instructions": 400,
        "dtype": CASE.dtype,
        "workload": CASE.workload,
        "case": CASE.label(),
    }
    return BuildMetrics(**{**defaults, **fields})


def commit(sha: str = "a" * 40, at: datetime = WHEN, **fields: Any) -> CommitInfo:
    """A commit of the main branch made at ``at``, with no parents unless given."""
    defaults: dict[str, Any] = {"parents": (), "message": f"commit {sha[:8]}", "branch": "main"}
    return CommitInfo(sha=sha, author_time=at.isoformat(), **{**defaults, **fields})


def run_info(at: datetime = WHEN, **fields: Any) -> RunInfo:
    """The header of a finished nightly run of ``commit(at=at)``, started 3 h after the commit
    and an hour long; a fresh ``run_id`` unless given."""
    defaults: dict[str, Any] = {
        "run_id": str(uuid.uuid4()),
        "trigger": "nightly",
        "repository": REPOSITORY,
        "suite": CASE.suite,
        "commit": commit(at=at),
        "device": DEVICE,
        "software": SOFTWARE,
        "started_at": (at + timedelta(hours=3)).isoformat(),
        "status": "ok",
        "finished_at": (at + timedelta(hours=4)).isoformat(),
    }
    return RunInfo(**{**defaults, **fields})


def run(records: Iterable[RunRecord] = (), info: RunInfo | None = None) -> Run:
    """A run of ``records`` under ``info`` (by default ``run_info()``)."""
    return Run.of(info if info is not None else run_info(), records)


def ingest_shuffled(conn: psycopg.Connection, runs: Sequence[Run], seed: int) -> None:
    """Ingest ``runs`` in an order drawn with ``seed``, as a spool may deliver them."""
    order = list(runs)
    random.Random(seed).shuffle(order)
    ingester = Ingester(conn)
    for r in order:
        ingester.ingest(r)


@pytest.fixture
def make_measurement() -> Callable[..., Measurement]:
    """:func:`measurement`: ``make_measurement(case, samples_ns=..., **fields)``."""
    return measurement


@pytest.fixture
def make_correctness() -> Callable[..., CorrectnessResult]:
    """:func:`correctness`: ``make_correctness(case, verdict, **fields)``."""
    return correctness


@pytest.fixture
def make_build() -> Callable[..., BuildMetrics]:
    """:func:`build`: ``make_build(**fields)``."""
    return build


@pytest.fixture
def make_run_info() -> Callable[..., RunInfo]:
    """:func:`run_info`: ``make_run_info(at, **fields)``."""
    return run_info


@pytest.fixture
def make_run() -> Callable[..., Run]:
    """:func:`run`: ``make_run(records, info)``."""
    return run
