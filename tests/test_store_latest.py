"""``latest_points`` (migration 0016): each series' latest nightly point and the one before
it, kept at ingest whatever order the runs arrive in (a spool replays an older night after
a newer one), with failed runs, PR runs and a night that did not measure a case left out."""

from __future__ import annotations

import importlib
from dataclasses import replace
from datetime import timedelta

import psycopg
from factories import CASE, WHEN, commit, ingest_shuffled, measurement, run, run_info

MIGRATION = importlib.import_module("kernelwatch.store.migrations.versions.0016_latest_points")
OTHER = replace(CASE, params={"rows": 8, "hidden": 512})
NIGHTS = 6


def _runs() -> list:
    """Six nights of two cases at 1000 ns + 10 ns a night; night 2 failed, night 4 measured
    only CASE, and a PR run after the last night timed both 10x slower."""
    runs = []
    for night in range(NIGHTS):
        at = WHEN + timedelta(days=night)
        info = run_info(at=at, commit=commit(f"{night:040x}", at=at),
                        status="failed" if night == 2 else "ok")  # fmt: skip
        cases = (CASE,) if night == 4 else (CASE, OTHER)
        runs.append(run([measurement(c, (1000.0 + 10 * night,) * 3) for c in cases], info))
    late = WHEN + timedelta(days=NIGHTS)
    pr = run_info(at=late, trigger="pr", commit=commit("f" * 40, at=late))
    runs.append(run([measurement(c, (1e4,) * 3) for c in (CASE, OTHER)], pr))
    return runs


def _points(conn: psycopg.Connection) -> list[tuple]:
    columns = [name for name, _, _ in (*MIGRATION.SERIES, *MIGRATION.LATEST, *MIGRATION.PREVIOUS)]
    return conn.execute(f"SELECT {', '.join(columns)} FROM latest_points ORDER BY 1").fetchall()


def test_each_series_keeps_its_latest_point_and_the_one_before_in_any_arrival_order(store_url):
    with psycopg.connect(store_url) as conn:
        ingest_shuffled(conn, _runs(), seed=3)
        filed = _points(conn)
        latest = {row[0]: row for row in conn.execute(
            "SELECT s.case_label, p.median_ns, p.previous_median_ns, p.commit_sha, "
            "p.previous_sha FROM latest_points p JOIN series s ON s.id = p.series_id"
        )}  # fmt: skip
        # The same rows as the migration files from the stored measurements.
        conn.execute("TRUNCATE latest_points")
        for statement in MIGRATION._backfill():
            conn.execute(statement)
        assert _points(conn) == filed
    assert latest == {
        "rows: 64, hidden: 4096": ("rows: 64, hidden: 4096", 1050.0, 1040.0,
                                   f"{5:040x}", f"{4:040x}"),
        # night 4 did not measure it, night 2 failed: its two latest are nights 5 and 3
        "rows: 8, hidden: 512": ("rows: 8, hidden: 512", 1050.0, 1030.0, f"{5:040x}", f"{3:040x}"),
    }  # fmt: skip
