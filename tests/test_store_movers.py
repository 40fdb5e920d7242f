"""``night_movers`` (migration 0017): per latest nightly of each repository and GPU model, the
cases that slowed most against the nightly before it, kept at ingest whatever order the runs
arrive in, so the morning panel lists the same rows as from every case's comparison."""

from __future__ import annotations

import importlib
from dataclasses import replace
from datetime import timedelta

import psycopg
from factories import CASE, DEVICE, WHEN, commit, ingest_shuffled, measurement, run, run_info

MIGRATION = importlib.import_module("kernelwatch.store.migrations.versions.0017_night_movers")
MOVERS = MIGRATION.MOVERS
#: More cases than are kept, so that which are kept is decided by their ratios.
CASES = [replace(CASE, params={"rows": i, "hidden": 512}) for i in range(MOVERS + 40)]
OTHER_GPU = replace(DEVICE, name="NVIDIA B200", uuid="GPU-2", capability="10.0")


def _runs() -> list:
    """Five nights on two GPU models; case i's median grows by a factor of its own each night
    (the last night ratios are all distinct), night 3 failed on the H200, and the B200's last
    night measured only half the cases."""
    runs = []
    for device in (DEVICE, OTHER_GPU):
        for night in range(5):
            at = WHEN + timedelta(days=night)
            failed = night == 3 and device is DEVICE
            info = run_info(at=at, commit=commit(f"{night:040x}", at=at), device=device,
                            status="failed" if failed else "ok")  # fmt: skip
            cases = CASES[::2] if night == 4 and device is OTHER_GPU else CASES
            runs.append(run([
                measurement(c, (1000.0 * (1 + ((7 * i) % 97) / 1000) ** night,) * 3, device=device)
                for i, c in enumerate(cases)
            ], info))  # fmt: skip
    return runs


def _movers(conn: psycopg.Connection) -> dict[str, list[tuple[str, float]]]:
    rows = conn.execute(
        "SELECT s.device_model, s.key, nm.night_ratio FROM night_movers nm "
        "JOIN series s ON s.id = nm.series_id ORDER BY nm.night_ratio DESC, s.key"
    ).fetchall()
    found: dict[str, list[tuple[str, float]]] = {}
    for model, key, ratio in rows:
        found.setdefault(model, []).append((key, ratio))
    return found


def test_the_most_slowed_cases_of_each_latest_nightly_are_kept_in_any_arrival_order(store_url):
    with psycopg.connect(store_url) as conn:
        ingest_shuffled(conn, _runs(), seed=5)
        kept = _movers(conn)
        everything = conn.execute(
            "SELECT device_model, series_key, night_ratio, previous_night FROM "
            "report_night_comparison ORDER BY night_ratio DESC, series_key"
        ).fetchall()
        # the migration's own filing of the stored runs gives the same rows
        conn.execute("TRUNCATE night_movers")
        conn.execute(MIGRATION.BACKFILL)
        assert _movers(conn) == kept
    expected: dict[str, list[tuple[str, float]]] = {}
    for model, key, ratio, _previous in everything:
        expected.setdefault(model, []).append((key, ratio))
    assert {m: [k for k, _ in rows] for m, rows in kept.items()} == {
        m: [k for k, _ in rows[:MOVERS]] for m, rows in expected.items()
    }
    assert len(kept["NVIDIA H200"]) == MOVERS
    # the B200's last night measured only half the cases: fewer than MOVERS are compared
    assert len(kept["NVIDIA B200"]) == len(CASES[::2]) < MOVERS
    # the H200's last night is compared with night 2, across the failed night 3
    previous = {p for model, _, _, p in everything if model == "NVIDIA H200"}
    assert previous == {WHEN + timedelta(days=2, hours=3)}
