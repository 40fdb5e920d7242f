"""Benchmark every Grafana panel, annotation, template-variable and alert-rule query of
kernelwatch's dashboards on a synthetic fleet history, as the read-only role Grafana uses.

The history is the store benchmark's synthetic fleet (``tests/synthetic_fleet.py``:
GPU models x series x nightly runs, PR runs, regressions), plus what the dashboards also
read: the cross-compiled builds of every kernel on every nightly run of the first GPU model,
and bisection steps for a share of the regressions. Each query is expanded as Grafana would
send it (kernelwatch.dashboards.macros, the dashboard's own time range, template variables
read by their own queries, a series drawn per call for the kernel history) and timed over
``--repeats`` calls after a warm-up, once the store is vacuumed and analysed.

    .venv/bin/python scripts/bench_dashboards.py                       # full scale (minutes)
    .venv/bin/python scripts/bench_dashboards.py --series 50 --days 20 # a quick look

With no ``--database-url`` it starts its own embedded PostgreSQL in a fresh temporary
directory and removes it afterwards. Prints one JSON object on stdout.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import random
import re
import resource
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import psycopg.sql

# bench_store is a sibling script, not part of the package: its embedded server and report.
sys.path.insert(0, str(Path(__file__).parent))
import bench_store

from kernelwatch.dashboards import catalog, inventory
from kernelwatch.dashboards.datasource import READER_ROLE
from kernelwatch.dashboards.macros import Request, expand
from kernelwatch.harness.records import BuildMetrics, LaunchConfig
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run

# The synthetic generators are test data: they live in tests/, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import synthetic_fleet

#: p95 targets: every query a dashboard runs on load, and "all cases of a kernel" on
#: kw-quarter (issue 30); a query's target is the first whose name it starts with.
TARGETS_MS = {"kw-quarter, one kernel": 100.0, "default": 10.0}
#: The name's end of a dashboard's variable cascade (its variable queries one after another,
#: as Grafana resolves them on load): timed for what a load costs, not a query with a target.
CASCADE = " variables, in load order (cascade)"
ARCHS = ("sm_90a", "sm_100a")
CONFIGS = (LaunchConfig({"BLOCK": 128}, 4, 2), LaunchConfig({"BLOCK": 256}, 8, 3))
TENSOR_CORES = {"sm_90a": "HGMMA", "sm_100a": "tcgen05"}


def builds(day: int) -> list[BuildMetrics]:
    """One nightly's builds: every kernel x arch x dtype x config, registers drifting."""
    return [
        BuildMetrics(
            synthetic_fleet.SUITE, kernel, f"{kernel}_kernel", "triton", arch, config, "ok",
            registers=96 + 8 * (day // 90) + 2 * k, spill_store_bytes=0, spill_load_bytes=0,
            shared_dynamic_bytes=49152, num_warps=config.num_warps,
            num_stages=config.num_stages, tensor_core=TENSOR_CORES[arch], opcodes={},
            toolchain={"ptxas": "12.9"}, dtype=dtype, workload="llm", case="tokens=1",
        )
        for k, kernel in enumerate(synthetic_fleet.KERNELS)
        for arch in ARCHS
        for dtype in synthetic_fleet.DTYPES
        for config in CONFIGS
    ]  # fmt: skip


def runs_with_builds(fleet: synthetic_fleet.Fleet, end: datetime) -> Iterator[Run]:
    """The store benchmark's runs, each nightly run of the first GPU model with its builds."""
    first_model = synthetic_fleet.MODELS[0][0]
    nightly = 0
    for run in synthetic_fleet.fleet_runs(fleet, end):
        if run.info.trigger == "nightly" and run.info.device.name == first_model:
            yield Run(run.info, (*run.records, *builds(nightly)))
            nightly += 1
        else:
            yield run


def add_bisections(conn: psycopg.Connection, steps: int) -> None:
    """Bisection steps for every other regression, as the bisect flow writes them."""
    conn.execute(
        """
        INSERT INTO bisect_steps (bisect_id, step, regression_id, repository_id, device_id,
            series_id, good_commit_id, probe_commit_id, verdict, ratio, ci_low, ci_high,
            samples, gpu_seconds, note)
        SELECT md5(g.id::text)::uuid, s, g.id, g.repository_id, r.device_id, cp.series_id,
            g.bad_commit_id, g.bad_commit_id,
            (ARRAY['SAME', 'SLOWER', 'AMBIGUOUS'])[1 + s %% 3], 1.0 + 0.01 * s,
            0.99 + 0.01 * s, 1.01 + 0.01 * s, 60, 12.5, 'synthetic'
        FROM regressions g
            CROSS JOIN generate_series(0, %(steps)s - 1) s
            JOIN LATERAL (SELECT series_id FROM change_points WHERE commit_id = g.bad_commit_id
                          LIMIT 1) cp ON true
            JOIN LATERAL (SELECT device_id FROM runs WHERE commit_id = g.bad_commit_id
                          LIMIT 1) r ON true
        WHERE g.id %% 2 = 1""",
        {"steps": steps},
    )
    conn.commit()


def add_pr_checks(conn: psycopg.Connection) -> None:
    """A check per PR run, against the same day's nightly on its GPU model, with a timing
    finding per case it measured, as the PR flow stores them."""
    conn.execute(
        """
        INSERT INTO pr_checks (head_run_id, base_run_id, pr_number, branch, author, outcome,
            verdict, report)
        SELECT pr.id, base.id, pr.id, c.branch, 'author-' || pr.id % 17, pr.id % 2,
            CASE WHEN pr.id % 2 = 1 THEN '1 case slower' ELSE 'no regression' END,
            'https://reports.example/kw/pr-' || pr.id || '.html'
        FROM runs pr
            JOIN commits c ON c.id = pr.commit_id
            JOIN devices d ON d.id = pr.device_id
            JOIN LATERAL (
                SELECT r.id FROM runs r JOIN devices rd ON rd.id = r.device_id
                WHERE r.trigger = 'nightly' AND rd.model = d.model
                    AND r.started_at <= pr.started_at
                ORDER BY r.started_at DESC LIMIT 1
            ) base ON true
        WHERE pr.trigger = 'pr'""",
    )
    conn.execute(
        """
        INSERT INTO pr_findings (head_run_id, base_run_id, kind, kernel, case_label, dtype,
            verdict, ratio, ci_low, ci_high, p_value, base_ns, head_ns)
        SELECT pc.head_run_id, pc.base_run_id, 'timing', k.name, s.case_label, s.dtype,
            CASE WHEN m.id % 97 = 0 THEN 'SLOWER' ELSE 'SAME' END, 1.0, 0.99, 1.01, 0.5,
            m.median_ns, m.median_ns
        FROM pr_checks pc
            JOIN measurements m ON m.run_id = pc.head_run_id
            JOIN series s ON s.id = m.series_id
            JOIN kernels k ON k.id = s.kernel_id""",
    )
    conn.commit()


def populate(fleet: synthetic_fleet.Fleet, url: str) -> dict[str, Any]:
    """Ingest the fleet with builds, then regressions and bisections; sizes and seconds."""
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    t0 = time.perf_counter()
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        # One run at a time: the fleet's year of runs held at once took 7 GB.
        for run in itertools.chain(
            runs_with_builds(fleet, end), synthetic_fleet.comm_runs(end, fleet.days)
        ):
            ingester.ingest(run)
        synthetic_fleet.add_regressions(conn, max(10, fleet.series // 4), fleet.seed,
                                        min(20, fleet.days // 2))  # fmt: skip
        add_bisections(conn, steps=6)
        add_pr_checks(conn)
        conn.autocommit = True
        # As a store a year old is: vacuumed. Timed right after the replay, autovacuum was
        # still working through the year's samples and every query ran 1.5-2x slower.
        conn.execute("VACUUM ANALYZE")
        counts = {
            table: conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("runs", "series", "measurements", "build_metrics", "change_points",
                          "regressions", "bisect_steps", "pr_findings", "night_kernel_stats")
        }  # fmt: skip
    return {"populate_s": round(time.perf_counter() - t0, 1), "rows": counts}


def _since(dashboard: dict[str, Any]) -> timedelta:
    match = re.fullmatch(r"now-(\d+)d", dashboard["time"]["from"])
    if not match:
        raise ValueError(f"{dashboard['uid']}: unexpected time range {dashboard['time']}")
    return timedelta(days=int(match.group(1)))


def time_queries(reader_url: str, repeats: int, seed: int) -> dict[str, dict[str, Any]]:
    """p50/p95 milliseconds and rows of every query, as the read-only role."""
    rnd = random.Random(seed)
    results: dict[str, dict[str, Any]] = {}
    now = datetime.now(UTC)
    with psycopg.connect(reader_url, autocommit=True) as conn:

        def run(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
            cur = conn.execute(sql)
            return [d.name for d in cur.description], cur.fetchall()

        series = run("SELECT kernel, dtype, device_model, series_key FROM report_series")[1]
        for dashboard in catalog.dashboards():
            results |= time_dashboard(dashboard, run, now, repeats, lambda: rnd.choice(series))
            if dashboard["uid"] == "kw-quarter":
                # "all cases of a kernel": the kernel picked, its lines summed at ingest
                kernel = {"kernel": [synthetic_fleet.KERNELS[-1]]}
                results |= time_dashboard(dashboard, run, now, repeats, lambda: rnd.choice(series),
                                          fixed=kernel, label="kw-quarter, one kernel")  # fmt: skip
        for spec, query in inventory.alert_queries():
            request = inventory.alert_request(spec, now)
            call = functools.partial(_rows, run, query.sql, request, itertools.repeat({}))
            results[f"alert: {spec.title}"] = _timed(call, repeats)
    return results


def time_dashboard(
    dashboard: dict[str, Any],
    run: inventory.Runner,
    now: datetime,
    repeats: int,
    draw: Callable[[], tuple[str, str, str, str]],
    fixed: dict[str, Any] | None = None,
    label: str = "",
) -> dict[str, dict[str, Any]]:
    """One dashboard's variables and queries over its default time range. The kernel
    history is timed on a series drawn per call, the others as the dashboard loads (or with
    the ``fixed`` choices, reported under ``label``)."""
    request = Request(now - _since(dashboard), now)
    per_series = dashboard["uid"] == "kw-history"
    label = label or dashboard["uid"]

    def resolve() -> dict[str, Any]:
        kernel, dtype, gpu, key = draw()
        pick = {"kernel": kernel, "dtype": dtype, "gpu": gpu, "case": key}
        return inventory.resolve(dashboard, request, run, pick if per_series else fixed or {})

    results = {f"{label}{CASCADE}": _timed(resolve, repeats)}
    selections = [resolve() for _ in range(repeats + 1 if per_series else 1)]
    for variable in dashboard["templating"]["list"]:
        if variable.get("type") == "query":
            picks = itertools.cycle(selections)
            call = functools.partial(_rows, run, variable["query"], request, picks)
            results[f"{label} variable: {variable['name']}"] = _timed(call, repeats)
    for query in inventory.dashboard_queries(dashboard):
        picks = itertools.cycle(selections)
        call = functools.partial(_rows, run, query.sql, request, picks)
        results[f"{label} {query.kind}: {query.title}"] = _timed(call, repeats)
    return results


def _rows(
    run: inventory.Runner, sql: str, request: Request, variables: Iterator[dict[str, Any]]
) -> list[Any]:
    """Run ``sql`` expanded with the next variable selection."""
    return run(expand(sql, request, next(variables)))[1]


def _timed(call: Callable[[], Any], repeats: int) -> dict[str, Any]:
    call()  # the first call plans and warms the cache; a dashboard refresh repeats it
    latencies = []
    rows = 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        rows = len(call())
        latencies.append((time.perf_counter() - t0) * 1e3)
    latencies.sort()
    return {
        "p50_ms": round(statistics.median(latencies), 3),
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))], 3),
        "rows": rows,
    }


def target_ms(name: str) -> float | None:
    """The p95 a query of this name must meet (None: a cascade, which is no one query)."""
    if name.endswith(CASCADE):
        return None
    return next((v for k, v in TARGETS_MS.items() if name.startswith(k)), TARGETS_MS["default"])


def measure(fleet: synthetic_fleet.Fleet, url: str, repeats: int) -> dict[str, Any]:
    """Populate ``url`` (migrated and empty) and time every query as the reader role."""
    report: dict[str, Any] = {"fleet": fleet.__dict__, **populate(fleet, url)}
    # The server authenticates every role (no trust): the reader gets a password of this run.
    password = secrets.token_urlsafe(24)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
            psycopg.sql.Identifier(READER_ROLE), psycopg.sql.Literal(password)))  # fmt: skip
    reader = psycopg.conninfo.make_conninfo(url, user=READER_ROLE, password=password)
    report["load_before"] = [round(x, 2) for x in os.getloadavg()]
    timings = time_queries(reader, repeats, fleet.seed)
    report["queries"] = {name: {**t, "target_ms": target_ms(name)} for name, t in timings.items()}
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    report["repeats"] = repeats
    report["targets_ms"] = TARGETS_MS
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    defaults = synthetic_fleet.Fleet()
    for name in ("models", "series", "days", "samples", "pr_runs_per_day", "pr_series", "seed"):
        parser.add_argument(
            f"--{name.replace('_', '-')}", type=int, default=getattr(defaults, name)
        )
    parser.add_argument("--repeats", type=int, default=200, help="calls per query")
    parser.add_argument(
        "--database-url",
        help="a migrated, empty database whose user may set the reader role's password "
        "(default: a fresh embedded server)",
    )
    args = parser.parse_args(argv)
    fleet = synthetic_fleet.Fleet(args.models, args.series, args.days, args.samples,
                                  args.pr_runs_per_day, args.pr_series, args.seed)  # fmt: skip
    bench_store.print_report(
        bench_store.measured_on(args.database_url, lambda url: measure(fleet, url, args.repeats))
    )


if __name__ == "__main__":
    main()
