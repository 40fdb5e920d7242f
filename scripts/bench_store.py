"""Benchmark the results store on a synthetic fleet history.

Generates GPU models x series x nightly runs x samples (plus PR runs) as the harness's own
records, times ``Ingester.ingest`` from those records in Python to committed rows, then times
every dashboard query of ``kernelwatch.store.queries`` with realistic filters, and reports
the on-disk bytes per raw sample (table, TOAST and indexes).

    .venv/bin/python scripts/bench_store.py                      # full scale (minutes)
    .venv/bin/python scripts/bench_store.py --series 50 --days 5 # a quick look

With no ``--database-url`` it starts its own embedded PostgreSQL in a fresh temporary
directory (the product's embedded-server code) and removes it afterwards. Prints one JSON
object on stdout.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg

from kernelwatch.harness.records import (
    CaseId,
    CommitInfo,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    Method,
    RunInfo,
    SoftwareInfo,
    SpeedOfLight,
    Summary,
    Telemetry,
)
from kernelwatch.store import migrate, queries
from kernelwatch.store.embedded import EmbeddedServer
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run

MODELS = (("NVIDIA H100 80GB HBM3", "9.0", 132), ("NVIDIA H200", "9.0", 132),
          ("NVIDIA B200", "10.0", 148))  # fmt: skip
KERNELS = ("rmsnorm", "add_rmsnorm", "softmax", "silu_and_mul", "rope", "gemm", "flash_attention")
DTYPES = ("bf16", "fp16", "fp32")
DEVICES_PER_MODEL = 4
REPOSITORY = "github.com/example/llm-kernels"
SUITE = "kernelwatch.kernels.suite"
METHOD = Method("cuda-events", "cold", 1)
SOFTWARE = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.65")


@dataclass(frozen=True)
class Fleet:
    """The synthetic fleet's shape."""

    models: int = 3
    series: int = 2000
    days: int = 365
    samples: int = 30
    pr_runs_per_day: int = 2
    pr_series: int = 200
    seed: int = 0


def cases(count: int) -> list[CaseId]:
    """``count`` distinct cases spread over the suite's kernels and dtypes."""
    out = []
    for i in range(count):
        kernel = KERNELS[i % len(KERNELS)]
        dtype = DTYPES[(i // len(KERNELS)) % len(DTYPES)]
        j = i // (len(KERNELS) * len(DTYPES))
        params = {"tokens": 2 ** (j % 12), "hidden": 1024 * (1 + (j // 12) % 16), "batch": j}
        out.append(CaseId(SUITE, kernel, "llm", params, dtype))
    return out


def devices(model_index: int) -> list[DeviceInfo]:
    name, capability, sms = MODELS[model_index]
    return [
        DeviceInfo("cuda", name, f"gpu-{model_index}-{d // 2}", False,
                   str(uuid.UUID(int=model_index * 100 + d + 1)), capability, sms)
        for d in range(DEVICES_PER_MODEL)
    ]  # fmt: skip


def make_run(
    fleet: Fleet,
    rng: np.random.Generator,
    device: DeviceInfo,
    case_list: list[CaseId],
    base_ns: np.ndarray,
    started: datetime,
    trigger: str,
    commit: CommitInfo,
    base_commit: str | None = None,
) -> Run:
    """One run's records, as the timing harness would produce them."""
    n, k = len(case_list), fleet.samples
    noise = rng.lognormal(0.0, 0.01, size=(n, k))
    times = base_ns[:, None] * noise
    throttled = rng.random((n, k)) < 0.01
    clocks = np.where(throttled, 1400.0, 1980.0)
    baseline = base_ns[:, None] * 1.2 * rng.lognormal(0.0, 0.01, size=(n, k))
    sorted_times = np.sort(times, axis=1)
    median = np.median(times, axis=1)
    p10, p90 = np.percentile(times, [10, 90], axis=1)
    half = 1.58 * (p90 - p10) / 2.56 / np.sqrt(k)
    config = LaunchConfig({"BLOCK": 128}, 4, 2)
    info = RunInfo(
        str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63)))),
        trigger, REPOSITORY, SUITE, commit, device, SOFTWARE, started.isoformat(), "ok",
        (started + timedelta(minutes=40)).isoformat(), base_commit, "h100-pool", None,
    )  # fmt: skip
    telemetry = Telemetry(True, 1980.0, 2619.0, 61.0, 540.0, 0, 0)
    records = []
    for i, case in enumerate(case_list):
        summary = Summary(
            k, float(median[i]), float(median[i] - half[i]), float(median[i] + half[i]),
            float(times[i].mean()), float(sorted_times[i, 0]), float(p10[i]), float(p90[i]),
            "converged", float(half[i] / median[i]),
        )  # fmt: skip
        records.append(
            Measurement(
                case, "ok", "", METHOD, device, SOFTWARE, config,
                tuple(times[i].tolist()), tuple(clocks[i].tolist()),
                tuple(throttled[i].tolist()), summary, telemetry,
                SpeedOfLight(1e3 / median[i], 3e6 / median[i], 40.0, 70.0, 70.0, "memory",
                             "datasheet"),
                "torch", float(median[i] * 1.2), 1.2, 0.05, "",
                tuple(clocks[i].tolist()), tuple(baseline[i].tolist()),
                tuple(throttled[i].tolist()), "autotune",
            )
        )  # fmt: skip
    return Run(info, tuple(records))


def fleet_runs(fleet: Fleet, end: datetime) -> Iterator[Run]:
    """Every run of the fleet's history in time order: each day a nightly run per GPU model
    (on one of its devices, in turn) and some PR runs on a subset of the series."""
    rng = np.random.default_rng(fleet.seed)
    case_list = cases(fleet.series)
    base = {m: rng.uniform(5e3, 5e6, size=fleet.series) for m in range(fleet.models)}
    fleet_devices = {m: devices(m) for m in range(fleet.models)}
    start = end - timedelta(days=fleet.days)
    parent = "0" * 40
    for day in range(fleet.days):
        at = start + timedelta(days=day)
        sha = f"{day + 1:040x}"
        commit = CommitInfo(sha, (parent,), at.isoformat(), f"change {day}", "main")
        parent = sha
        for m in range(fleet.models):
            # a 3% step every 90 days, for the history charts to show something
            if day and day % 90 == 0:
                base[m][rng.integers(0, fleet.series, 20)] *= 1.03
            device = fleet_devices[m][day % DEVICES_PER_MODEL]
            yield make_run(fleet, rng, device, case_list, base[m], at + timedelta(hours=3),
                           "nightly", commit)  # fmt: skip
        for p in range(fleet.pr_runs_per_day):
            m = int(rng.integers(0, fleet.models))
            pick = rng.choice(fleet.series, size=min(fleet.pr_series, fleet.series), replace=False)
            pr_commit = CommitInfo(f"{day + 1:020x}{p + 1:020x}", (sha,), at.isoformat(),
                                   f"pr {day}/{p}", f"pr-{day}-{p}")  # fmt: skip
            yield make_run(fleet, rng, fleet_devices[m][p % DEVICES_PER_MODEL],
                           [case_list[i] for i in pick], base[m][pick],
                           at + timedelta(hours=12 + p), "pr", pr_commit, sha)  # fmt: skip


def add_regressions(conn: psycopg.Connection, count: int, seed: int, back: int = 1) -> None:
    """Change points and regressions as detection would write them, so the regression
    queries have rows to find (this benchmark has no detector of its own)."""
    conn.execute(
        """
        WITH picked AS (
            SELECT s.id AS series_id, m.id AS measurement_id, m.measured_at, r.commit_id,
                row_number() OVER () AS n
            FROM (SELECT id FROM series ORDER BY md5(id::text || %(seed)s) LIMIT %(count)s) s
            CROSS JOIN LATERAL (
                SELECT id, run_id, measured_at FROM measurements
                WHERE series_id = s.id AND history
                ORDER BY measured_at DESC, id DESC LIMIT 1 OFFSET %(back)s
            ) m JOIN runs r ON r.id = m.run_id
        ), groups AS (
            INSERT INTO regressions (repository_id, title, state, cause, magnitude,
                bad_commit_id, culprit_commit_id, created_at)
            SELECT (SELECT id FROM repositories LIMIT 1), 'synthetic regression ' || n,
                (ARRAY['untriaged','acknowledged','investigating','fixed','false_positive'])
                    [1 + n %% 5], 'code', 0.03, commit_id, commit_id, measured_at
            FROM picked WHERE n %% 4 = 0
            RETURNING id, bad_commit_id
        )
        INSERT INTO change_points (series_id, measurement_id, commit_id, at, detector,
            before_ns, after_ns, rel_change, direction, regression_id)
        SELECT p.series_id, p.measurement_id, p.commit_id, p.measured_at, 'synthetic',
            1.0, 1.03, 0.03, 'regression',
            (SELECT g.id FROM groups g WHERE g.bad_commit_id = p.commit_id LIMIT 1)
        FROM picked p""",
        {"count": count, "seed": str(seed), "back": back},
    )
    conn.commit()


def time_queries(conn: psycopg.Connection, repeats: int, seed: int) -> dict[str, dict[str, float]]:
    """p50/p95 milliseconds of each dashboard query, parameters drawn per call."""
    rnd = random.Random(seed)
    series_keys = [r[0] for r in conn.execute("SELECT key FROM series")]
    models = [r[0] for r in conn.execute("SELECT DISTINCT device_model FROM series")]
    pr_runs = [str(r[0]) for r in conn.execute("SELECT run_id FROM runs WHERE trigger = 'pr'")]
    pr_runs = pr_runs or [str(r[0]) for r in conn.execute("SELECT run_id FROM runs")]
    now = datetime.now(UTC)
    calls = {
        "latest": lambda: queries.latest(
            conn, device_model=rnd.choice(models), kernel=rnd.choice(KERNELS),
            dtype=rnd.choice(DTYPES)),
        "series_history": lambda: queries.series_history(
            conn, rnd.choice(series_keys), since=now - timedelta(days=365)),
        "open_regressions": lambda: queries.open_regressions(conn, repository=REPOSITORY),
        "regressions_past_year": lambda: queries.regressions(
            conn, since=now - timedelta(days=365), repository=REPOSITORY),
        "device_noise": lambda: queries.device_noise(conn, since=now - timedelta(days=30)),
        "run_comparison": lambda: queries.run_comparison(conn, rnd.choice(pr_runs)),
        "annotations": lambda: queries.annotations(conn, since=now - timedelta(days=90)),
    }  # fmt: skip
    results = {}
    for name, call in calls.items():
        call()  # first call plans and warms the cache; dashboards call the same again
        latencies = []
        rows = 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            rows = len(call())
            latencies.append((time.perf_counter() - t0) * 1e3)
        latencies.sort()
        results[name] = {
            "p50_ms": round(statistics.median(latencies), 3),
            "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
            "rows": rows,
        }
    return results


def sample_bytes(conn: psycopg.Connection) -> dict[str, float]:
    """On-disk size of the raw samples (heap, TOAST, indexes) per stored kernel sample (the
    target's unit: the baseline's samples ride in the same rows) and per raw sample (kernel
    and baseline)."""
    conn.execute("VACUUM ANALYZE samples")
    total = conn.execute("SELECT pg_total_relation_size('samples')").fetchone()[0]
    kernel = int(conn.execute("SELECT coalesce(sum(samples), 0) FROM runs").fetchone()[0])
    raw = int(conn.execute("SELECT coalesce(sum(cardinality(times_ns)), 0) FROM samples")
              .fetchone()[0])  # fmt: skip
    return {"samples": kernel, "raw_samples": raw, "bytes": int(total),
            "bytes_per_sample": round(total / max(kernel, 1), 2),
            "bytes_per_raw_sample": round(total / max(raw, 1), 2)}  # fmt: skip


def run(fleet: Fleet, url: str, repeats: int) -> dict[str, Any]:
    """Ingest the fleet into ``url`` (which must be migrated and empty) and time queries."""
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    ingest_s = 0.0
    samples = measurements = runs = 0
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for one in fleet_runs(fleet, end):
            t0 = time.perf_counter()
            result = ingester.ingest(one)
            ingest_s += time.perf_counter() - t0
            samples += result.samples
            measurements += result.measurements
            runs += 1
        add_regressions(conn, max(10, fleet.series // 4), fleet.seed, min(20, fleet.days // 2))
        conn.autocommit = True
        conn.execute("ANALYZE")
        size = sample_bytes(conn)
        latencies = time_queries(conn, repeats, fleet.seed)
    return {
        "fleet": fleet.__dict__,
        "runs": runs,
        "measurements": measurements,
        "samples": samples,
        "ingest_s": round(ingest_s, 2),
        "samples_per_s": round(samples / ingest_s),
        "kernel_samples_per_s": round(size["samples"] / ingest_s),
        "measurements_per_s": round(measurements / ingest_s),
        "storage": size,
        "queries": latencies,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = Fleet()
    for name in ("models", "series", "days", "samples", "pr_runs_per_day", "pr_series", "seed"):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name)
        )
    parser.add_argument("--repeats", type=int, default=200, help="calls per query")
    parser.add_argument("--database-url", help="a migrated, empty database (default: embedded)")
    args = parser.parse_args(argv)
    fleet = Fleet(args.models, args.series, args.days, args.samples, args.pr_runs_per_day,
                  args.pr_series, args.seed)  # fmt: skip
    print_report(measured_on(args.database_url, lambda url: run(fleet, url, args.repeats)))


def measured_on(database_url: str | None, measure: Callable[[str], dict]) -> dict:
    """``measure(url)`` on ``database_url``, or on a fresh embedded server in a temporary
    directory (removed afterwards; its version goes into the report)."""
    if database_url:
        return measure(database_url)
    root = Path(tempfile.mkdtemp(prefix="kw-bench-", dir="/tmp"))
    server = EmbeddedServer(root)
    try:
        report = {"server": server.ensure_running().version}
        migrate.upgrade(server.url())
        return report | measure(server.url())
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(root, ignore_errors=True)


def print_report(report: dict) -> None:
    """The report as indented JSON on stdout."""
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
