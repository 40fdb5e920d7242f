"""Benchmark the results store on a synthetic fleet history.

Generates GPU models x series x nightly runs x samples (plus PR runs) as the harness's own
records (``tests/synthetic_fleet.py``), times ``Ingester.ingest`` from those records in
Python to committed rows, then times every query over the reporting views
(``kernelwatch.store.report_queries``) with realistic filters, and reports the on-disk
bytes per raw sample (table, TOAST and indexes).

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
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from kernelwatch.store import migrate, report_queries
from kernelwatch.store.embedded import EmbeddedServer
from kernelwatch.store.ingest import Ingester

# The synthetic generators are test data: they live in tests/, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_fleet import DTYPES, KERNELS, REPOSITORY, Fleet, add_regressions, fleet_runs


def time_queries(conn: psycopg.Connection, repeats: int, seed: int) -> dict[str, dict[str, float]]:
    """p50/p95 milliseconds of each reporting-view query, parameters drawn per call."""
    rnd = random.Random(seed)
    series_keys = [r[0] for r in conn.execute("SELECT key FROM series")]
    models = [r[0] for r in conn.execute("SELECT DISTINCT device_model FROM series")]
    pr_runs = [str(r[0]) for r in conn.execute("SELECT run_id FROM runs WHERE trigger = 'pr'")]
    pr_runs = pr_runs or [str(r[0]) for r in conn.execute("SELECT run_id FROM runs")]
    now = datetime.now(UTC)
    calls = {
        "latest": lambda: report_queries.latest(
            conn, device_model=rnd.choice(models), kernel=rnd.choice(KERNELS),
            dtype=rnd.choice(DTYPES)),
        "series_history": lambda: report_queries.series_history(
            conn, rnd.choice(series_keys), since=now - timedelta(days=365)),
        "open_regressions": lambda: report_queries.open_regressions(conn, repository=REPOSITORY),
        "regressions_past_year": lambda: report_queries.regressions(
            conn, since=now - timedelta(days=365), repository=REPOSITORY),
        "device_noise": lambda: report_queries.device_noise(conn, since=now - timedelta(days=30)),
        "run_comparison": lambda: report_queries.run_comparison(conn, rnd.choice(pr_runs)),
        "annotations": lambda: report_queries.annotations(conn, since=now - timedelta(days=90)),
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
