"""The results store against a real PostgreSQL (the embedded server, in a temp directory)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import psycopg
import pytest
from pg_roles import as_role
from synthetic_fleet import MODELS, Fleet, add_regressions, fleet_runs

from kernelwatch.config.database import StoreConfig
from kernelwatch.config.settings import load
from kernelwatch.config.tables import ConfigError
from kernelwatch.harness.records import RecordError
from kernelwatch.store import migrate, report_queries
from kernelwatch.store.embedded import EmbeddedServer
from kernelwatch.store.identity import series_key
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run, read_run_file, write_run_file
from kernelwatch.store.spool import Submitter, pending, replay

ROOT = Path(__file__).parent.parent
NOW = datetime(2026, 1, 10, tzinfo=UTC)


def small_runs(series=12, days=3, pr=1, seed=0) -> list[Run]:
    fleet = Fleet(models=2, series=series, days=days, samples=7, pr_runs_per_day=pr,
                  pr_series=4, seed=seed)  # fmt: skip
    return list(fleet_runs(fleet, NOW))


def count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchone()[0]


def _setting(url: str, name: str) -> str:
    with psycopg.connect(url) as conn:
        return conn.execute("SELECT current_setting(%s)", (name,)).fetchone()[0]


def test_head_constant_matches_alembic():
    assert migrate.script_head() == migrate.HEAD


def test_migrations_up_and_down(pg_server):
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS t_migrate")
        conn.execute("CREATE DATABASE t_migrate")
    url = pg_server.url("t_migrate")
    tables = "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
    views = "SELECT count(*) FROM pg_views WHERE schemaname = 'public'"
    migrate.upgrade(url, "0002")
    # the views are the head's alone (store/views/): none below it
    assert count(url, tables) == 17 and count(url, views) == 0
    migrate.upgrade(url)
    assert count(url, "SELECT count(*) FROM pg_tables WHERE tablename = 'bisect_steps'") == 1
    assert count(url, "SELECT count(*) FROM pg_views WHERE viewname = 'report_triage_board'") == 1
    assert count(url, views) == sum(d.kind == "view" for d in migrate.definitions())
    # every query of the store is short: a JIT compile cost 1.5 s an ingest (migration 0017)
    assert _setting(url, "jit") == "off"
    migrate.downgrade(url, "0001")
    assert count(url, views) == 0 and count(url, tables) == 17
    assert _setting(url, "jit") == "on"
    migrate.downgrade(url, "base")
    assert count(url, tables) == 1  # alembic_version alone
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        assert migrate.current_revision(conn) == migrate.HEAD


def test_ingest_is_complete_and_idempotent(store_url, make_correctness, make_build):
    runs = small_runs()
    run = runs[0]
    first_case, config = run.records[0].case, run.records[0].config
    check = make_correctness(
        first_case, device=run.info.device, software=run.info.software, config=config
    )
    build = make_build(
        suite=first_case.suite, kernel="gemm", function="matmul_kernel", config=config,
        registers=122, tensor_core="HGMMA", opcodes={"HGMMA": 4}, toolchain={"ptxas": "12.9"},
        dtype="bf16", case="m=64 n=64 k=64",
    )  # fmt: skip
    run = Run(run.info, (*run.records, check, build))
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        first = ingester.ingest(run)
        again = ingester.ingest(run)
        fresh = Ingester(conn).ingest(run)  # a new process would have no cache
    assert first.stored and first.measurements == 12 and first.correctness == 1
    assert first.builds == 1
    assert first.samples == 12 * 7 * 2  # kernel and baseline samples
    assert not again.stored and not fresh.stored
    assert count(store_url, "SELECT count(*) FROM runs") == 1
    assert count(store_url, "SELECT count(*) FROM measurements") == 12
    assert count(store_url, "SELECT count(*) FROM samples") == 12
    assert count(store_url, "SELECT count(*) FROM correctness_results") == 1
    with psycopg.connect(store_url) as conn:
        assert conn.execute(
            "SELECT registers, opcodes, case_label, extra FROM build_metrics"
        ).fetchone() == (122, {"HGMMA": 4}, "m=64 n=64 k=64", None)

    m = run.records[3]
    with psycopg.connect(store_url) as conn:
        row = conn.execute(
            """SELECT s.samples_ns, s.sm_clock_mhz, s.mem_clock_mhz, s.throttled::text,
                s.baseline_ns, s.baseline_throttled::text, x.median_ns, x.config_source, x.extra
            FROM raw_samples s JOIN measurements x ON x.id = s.measurement_id
            JOIN series ON series.id = x.series_id WHERE series.key = %s""",
            (series_key(run.info.repository, m.case, m.device.name, m.method),),
        ).fetchone()
    times, sm, mem, flags, baseline, baseline_flags, median, source, extra = row
    # float4 storage: exactly the float32 rounding of every sample
    assert np.array_equal(np.float32(times), np.float32(m.samples_ns))
    assert sm == [int(v) for v in m.sm_clock_mhz] and mem == [int(v) for v in m.mem_clock_mhz]
    assert flags == "".join("1" if t else "0" for t in m.throttled)
    assert np.array_equal(np.float32(baseline), np.float32(m.baseline_samples_ns))
    assert baseline_flags == "".join("1" if t else "0" for t in m.baseline_throttled)
    assert median == m.summary.median_ns and source == "autotune" and extra is None


def test_samples_round_trip_every_shape(store_url):
    """Constant and varying clocks, no clocks, no baseline, no samples at all, and flags
    not parallel to the samples: the raw_samples view gives back exactly what came in."""
    run = small_runs(series=6, days=1, pr=0)[0]
    first = run.records[0]
    shapes = [
        dataclasses.replace(first, sm_clock_mhz=(1980.0,) * 7, mem_clock_mhz=(2619.0,) * 7),
        dataclasses.replace(first, sm_clock_mhz=(1980.0, 1410.0) * 3 + (1980.0,)),
        dataclasses.replace(first, sm_clock_mhz=(), mem_clock_mhz=()),
        dataclasses.replace(first, baseline_samples_ns=(), baseline_throttled=()),
        dataclasses.replace(first, samples_ns=(), sm_clock_mhz=(), mem_clock_mhz=(),
                            throttled=(), summary=None, status="error", reason="boom"),
        dataclasses.replace(first, throttled=(True,)),
    ]  # fmt: skip
    records = tuple(
        dataclasses.replace(m, case=other.case)
        for m, other in zip(shapes, run.records, strict=True)
    )
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(Run(run.info, records))
        rows = conn.execute(
            """SELECT s.samples_ns, s.sm_clock_mhz, s.mem_clock_mhz, s.throttled::text,
                s.baseline_ns, s.baseline_throttled::text, x.extra, x.status, x.median_ns
            FROM raw_samples s JOIN measurements x ON x.id = s.measurement_id ORDER BY x.id"""
        ).fetchall()

    def bits(flags: tuple[bool, ...]) -> str:
        return "".join("1" if f else "0" for f in flags)

    for m, (times, sm, mem, flags, base, base_flags, extra, status, median) in zip(
        records, rows, strict=True
    ):
        assert np.array_equal(np.float32(times), np.float32(m.samples_ns))
        assert sm == list(m.sm_clock_mhz) and mem == list(m.mem_clock_mhz)
        assert np.array_equal(np.float32(base), np.float32(m.baseline_samples_ns))
        assert status == m.status and median == (m.summary and m.summary.median_ns)
        if m is records[-1]:  # flags not parallel to the samples: kept in extra exactly
            assert flags == base_flags == ""
            assert extra == {"throttled": [True], "baseline_throttled": list(m.baseline_throttled)}
        else:
            assert (flags, base_flags) == (bits(m.throttled), bits(m.baseline_throttled))
            assert extra is None


def test_nothing_is_lost_when_clocks_are_not_whole_mhz(store_url):
    run = small_runs(series=3, days=1, pr=0)[0]
    odd = dataclasses.replace(run.records[0], sm_clock_mhz=(1980.5,) * 7)
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(Run(run.info, (odd, *run.records[1:])))
        extras = conn.execute("SELECT extra FROM measurements WHERE extra IS NOT NULL").fetchall()
        clocks = conn.execute(
            "SELECT sm_clock_mhz, mem_clock_mhz FROM raw_samples ORDER BY measurement_id"
        ).fetchall()
    assert extras == [({"sm_clock_mhz": [1980.5] * 7, "mem_clock_mhz": [1980.0] * 7},)]
    assert clocks[0] == ([], [])  # the exact values are in extra, nothing rounded here


def test_reporting_views_and_queries(store_url):
    runs = small_runs()
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        for run in reversed(runs):  # out of order, as a replay may deliver them
            ingester.ingest(run)
        add_regressions(conn, 12, 0)  # three regressions: one open, one fixed, one false
        latest = report_queries.latest(conn, device_model=MODELS[0][0])
        assert len(latest) == 12
        newest_nightly = max(
            r.info.started_at for r in runs
            if r.info.trigger == "nightly" and r.info.device.name == MODELS[0][0]
        )  # fmt: skip
        assert {row["measured_at"] for row in latest} == {datetime.fromisoformat(newest_nightly)}
        key = latest[0]["series_key"]
        history = report_queries.series_history(conn, key, since=NOW - timedelta(days=30))
        assert len(history) == 3 and history[0]["measured_at"] < history[-1]["measured_at"]
        pr_run = next(r for r in runs if r.info.trigger == "pr")
        comparison = report_queries.run_comparison(conn, pr_run.info.run_id)
        assert len(comparison) == 4 and all(row["reference_median_ns"] for row in comparison)
        every = report_queries.regressions(conn, since=NOW - timedelta(days=400))
        still_open = [r["title"] for r in every if r["state"] not in ("fixed", "false_positive")]
        assert len(every) == 3 and len(still_open) == 1
        assert [r["title"] for r in report_queries.open_regressions(conn)] == still_open
        noise = report_queries.device_noise(conn, since=NOW - timedelta(days=30))
        assert sum(row["runs"] for row in noise) == len(runs)


def test_method_change_is_annotated(store_url):
    run = small_runs(series=2, days=1, pr=0)[0]
    method = dataclasses.replace(run.records[0].method, l2="warm")
    later = dataclasses.replace(run.info, run_id="00000000-0000-0000-0000-00000000beef")
    changed = Run(later, tuple(dataclasses.replace(m, method=method) for m in run.records))
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(run)
        Ingester(conn).ingest(changed)
        notes = report_queries.annotations(conn, since=NOW - timedelta(days=400))
    assert [n["kind"] for n in notes] == ["method_change", "method_change"]
    assert "cold" in notes[0]["text"] and "warm" in notes[0]["text"]


def test_roles(store_url):
    run = small_runs(series=3, days=1, pr=0)[0]
    writer = as_role(store_url, "kernelwatch_writer")
    reader = as_role(store_url, "kernelwatch_reader")
    with psycopg.connect(writer) as conn:
        assert Ingester(conn).ingest(run).stored
    with psycopg.connect(reader) as conn:
        assert len(report_queries.latest(conn)) == 3
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT count(*) FROM measurements")


def test_run_file_round_trip_and_rejects(tmp_path):
    run = small_runs(series=2, days=1, pr=0)[0]
    path = tmp_path / "run.jsonl"
    write_run_file(run, path)
    assert read_run_file(path) == run
    path.write_text(path.read_text().split("\n", 1)[1])
    with pytest.raises(RecordError, match="first record must be the run header"):
        read_run_file(path)


def test_config_precedence(tmp_path, monkeypatch):
    for var in ("KERNELWATCH_DATABASE_URL", "KERNELWATCH_CONFIG", "KERNELWATCH_SPOOL_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernelwatch.toml").write_text('[database]\nurl = "postgresql://a/b"\n')
    assert load().database.url == "postgresql://a/b"
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", "postgresql://c/d")
    assert load().database.url == "postgresql://c/d"
    (tmp_path / "kernelwatch.toml").write_text("[database]\nurl = 3\n")
    monkeypatch.delenv("KERNELWATCH_DATABASE_URL")
    with pytest.raises(ConfigError, match=r"\[database\] url must be a string"):
        load()


def test_spool_and_replay_after_server_stopped_mid_run(tmp_path):
    # Its own server, under /tmp so that as root the server's user can reach it.
    server = EmbeddedServer(Path("/tmp") / f"kw-spool-{os.getpid()}")
    try:
        server.ensure_running()
        migrate.upgrade(server.url())
        config = StoreConfig(url=server.url(), spool_dir=tmp_path / "spool", pg_dir=server.root)
        fleet = Fleet(models=3, series=100, days=6, samples=30, pr_runs_per_day=0)
        runs = list(fleet_runs(fleet, NOW))

        def stop_after_some_runs() -> None:
            while count(server.url(), "SELECT count(*) FROM runs") < 2:
                time.sleep(0.01)
            server.stop()

        stopper = threading.Thread(target=stop_after_some_runs)
        stopper.start()
        submitter = Submitter(config)
        outcomes = [submitter.submit(run) for run in runs]
        stopper.join()
        submitter.close()
        spooled = [o for o in outcomes if o.spooled]
        assert spooled and len(pending(config.spool_dir)) == len(spooled)
        assert all(o.reason for o in spooled)

        server.ensure_running()
        report = replay(config)
        assert report.remaining == 0 and not report.rejected
        assert len(report.loaded) + len(report.duplicates) == len(spooled)
        assert pending(config.spool_dir) == []
        assert replay(config).loaded == []  # nothing left to do
        url = server.url()
        assert count(url, "SELECT count(DISTINCT run_id) FROM runs") == len(runs)
        assert count(url, "SELECT count(*) FROM runs") == len(runs)
        assert count(url, "SELECT count(*) FROM measurements") == len(runs) * 100
        assert count(url, "SELECT count(*) FROM samples") == len(runs) * 100
        assert count(url, "SELECT sum(cardinality(samples_ns)) FROM raw_samples") == (
            len(runs) * 100 * 30
        )
    finally:
        server.stop(mode="immediate")
        shutil.rmtree(server.root, ignore_errors=True)


WORKER = """
import sys
from datetime import UTC, datetime
import psycopg
from kernelwatch.store.ingest import Ingester
from synthetic_fleet import Fleet, fleet_runs
fleet = Fleet(models=3, series=60, days=2, samples=10, pr_runs_per_day=1, pr_series=10,
              seed=int(sys.argv[2]) % 4)
with psycopg.connect(sys.argv[1]) as conn:
    ingester = Ingester(conn)
    print(sum(ingester.ingest(r).stored
              for r in fleet_runs(fleet, datetime(2026, 1, 10, tzinfo=UTC))))
"""


def test_a_process_that_writes_the_store_loads_no_torch():
    """The store's writers (and the fleet generator the workers below use) are pure Python:
    torch is 3 s of CPU per process, for the children that run kernels. The bandwidth
    arithmetic once imported it through spec.py's list of collectives."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, kernelwatch.store.ingest, synthetic_fleet; "
         "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton'}))"],
        cwd=ROOT / "tests", capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert loaded.stdout.strip() == "[]"


def test_concurrent_ingest_from_8_processes(store_url):
    # Worker i ingests the fleet of seed i % 4: every run is submitted by two processes at
    # once, and all of them create the same series concurrently. The workers run in tests/ so
    # that they import the fleet generator as the tests do.
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, store_url, str(i)], cwd=ROOT / "tests",
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for i in range(8)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    stored = sum(int(out) for out, _ in outs)
    runs_per_fleet = 2 * (3 + 1)
    assert stored == 4 * runs_per_fleet
    assert count(store_url, "SELECT count(*) FROM runs") == 4 * runs_per_fleet
    assert count(store_url, "SELECT count(*) FROM series") == 3 * 60
    assert count(store_url, "SELECT count(*) FROM measurements") == 4 * 2 * (3 * 60 + 10)
    assert count(store_url, "SELECT count(*) FROM samples") == 4 * 2 * (3 * 60 + 10)


def test_db_status_starts_the_embedded_server_then_reuses_it(
    tmp_path, monkeypatch, kernelwatch_cli
):
    pg_dir = Path("/tmp") / f"kw-status-{os.getpid()}"
    monkeypatch.setenv("KERNELWATCH_PG_DIR", str(pg_dir))
    monkeypatch.setenv("KERNELWATCH_SPOOL_DIR", str(tmp_path / "spool"))
    monkeypatch.delenv("KERNELWATCH_DATABASE_URL", raising=False)
    monkeypatch.delenv("KERNELWATCH_CONFIG", raising=False)
    try:
        first = kernelwatch_cli("db", "status", cwd=tmp_path)
        second = kernelwatch_cli("db", "status", cwd=tmp_path)
        assert first.returncode == 0, first.stderr
        assert "started now" in first.stdout and f"schema: {migrate.HEAD} (head)" in first.stdout
        assert "already running" in second.stdout, second.stdout
        assert f"schema: {migrate.HEAD} (head)" in second.stdout
        assert kernelwatch_cli("db", "stop", cwd=tmp_path).stdout.strip() == "server: stopped"
    finally:
        EmbeddedServer(pg_dir).stop()
        shutil.rmtree(pg_dir, ignore_errors=True)


def test_benchmark_script_small_scale(store_url):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench_store.py"), "--models", "2",
         "--series", "40", "--days", "3", "--samples", "10", "--pr-series", "5",
         "--repeats", "3", "--database-url", store_url],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["runs"] == 3 * (2 + 2) and report["samples"] == report["measurements"] * 20
    assert set(report["queries"]) >= {"latest", "series_history", "open_regressions",
                                      "device_noise", "run_comparison"}  # fmt: skip
    assert report["storage"]["bytes_per_sample"] > 0
