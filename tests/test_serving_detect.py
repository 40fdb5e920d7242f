"""Issue 43: a deployment's stored history judged and its serving regressions opened
(serving/judge.py over store/serving.py): one regression at the run that stepped, carrying
the kernel commits served before and after; judging again opens nothing twice; a throughput
rise opens nothing; failed runs never become a baseline. Histories are ingested from vLLM
result files built from its documented keys."""

from __future__ import annotations

import json
from datetime import timedelta

import psycopg
from serving_files import METADATA, START, nightly_history, vllm_failed

from kernelwatch.analysis.thresholds import DetectorConfig
from kernelwatch.flows.serving_results import judge_deployments
from kernelwatch.serving.formats import Given, read_text
from kernelwatch.store import serving
from kernelwatch.store.triage_state import list_regressions, show_regression

MTIME = "2026-12-02T03:00:00+00:00"


def _ingest(conn: psycopg.Connection, results: list[dict]) -> None:
    for result in results:
        for run in read_text(json.dumps(result), "result.json", Given(), MTIME):
            serving.ingest(conn, run)


def _judge(conn: psycopg.Connection) -> list[serving.Recorded]:
    return [judged.recorded for judged in judge_deployments(conn, DetectorConfig())]


STEP = [20.0] * 20 + [21.2] * 15  # p99 TPOT +6% from night 20
FLAT = [5000.0] * 35


def test_a_six_percent_p99_tpot_step_opens_one_regression_at_its_run(store_url):
    with psycopg.connect(store_url) as conn:
        _ingest(conn, nightly_history(STEP, FLAT))
        (recorded,) = _judge(conn)
        (regression_id,) = recorded.opened
        (row,) = list_regressions(conn)
        assert row["regression_id"] == regression_id and row["kind"] == "serving"
        assert row["repository"] is None  # its kernel commits were never measured here
        assert row["title"].startswith("serving chat-8b: p99_tpot_ms +")
        assert "kernel 20c0ffeec0ff (was 19c0ffeec0ff)" in row["title"]
        assert 0.045 < row["magnitude"] < 0.075
        stored = conn.execute(
            """SELECT sc.metric, r.kernel_commit, p.kernel_commit, sc.provisional
            FROM serving_changes sc JOIN serving_runs r ON r.id = sc.run_pk
                JOIN serving_runs p ON p.id = sc.previous_run_pk
            WHERE sc.regression_id = %s""",
            (regression_id,),
        ).fetchall()
        assert [(m, after[:2], before[:2], prov) for m, after, before, prov in stored] == [
            ("p99_tpot_ms", "20", "19", False)
        ]
        # Judged again (tomorrow, or by another host): nothing new, nothing opened twice.
        (again,) = _judge(conn)
        assert (again.new_changes, again.opened, again.grown) == (0, (), ())
        assert len(list_regressions(conn)) == 1
        assert show_regression(conn, regression_id)["events"][0]["actor"] == "kernelwatch"


def test_a_step_on_a_measured_kernel_commit_lists_with_its_repository(store_url):
    history = nightly_history(STEP, FLAT)
    with psycopg.connect(store_url) as conn:
        (repo_id,) = conn.execute(
            "INSERT INTO repositories (name) VALUES ('kernels') RETURNING id"
        ).fetchone()
        for night in (19, 20):
            conn.execute(
                "INSERT INTO commits (repository_id, sha) VALUES (%s, %s)",
                (repo_id, history[night]["kernel_commit"] + "00"),
            )
        _ingest(conn, history)
        _judge(conn)
        (row,) = list_regressions(conn, repository="kernels")
        assert row["kind"] == "serving"
        assert (row["good_sha"][:2], row["bad_sha"][:2]) == ("19", "20")


def test_throughput_falling_opens_a_regression_and_rising_does_not(store_url):
    falling = [5000.0] * 20 + [4600.0] * 15
    rising = [5000.0] * 20 + [5400.0] * 15
    flat = [20.0] * 35
    with psycopg.connect(store_url) as conn:
        _ingest(conn, nightly_history(flat, falling))
        rows = [{**r, "deployment": "rising"} for r in nightly_history(flat, rising, seed=1)]
        _ingest(conn, rows)
        recorded = _judge(conn)
        assert [len(r.opened) for r in recorded] == [1, 0]
        (row,) = list_regressions(conn)
        assert "output_throughput -" in row["title"] and -0.1 < row["magnitude"] < -0.06
        directions = conn.execute(
            "SELECT d.name, sc.direction FROM serving_changes sc "
            "JOIN deployments d ON d.id = sc.deployment_id ORDER BY d.name"
        ).fetchall()
        assert directions == [("chat-8b", "regression"), ("rising", "improvement")]


def test_failed_runs_inside_the_history_are_no_baseline(store_url):
    history = nightly_history(STEP, FLAT)
    failed = []
    for i in (5, 25):
        dead = vllm_failed(metadata={**METADATA, "kernel_commit": f"dead{i:02d}"})
        dead["date"] = (START + timedelta(days=i, hours=1)).strftime("%Y%m%d-%H%M%S")
        failed.append(dead)
    with psycopg.connect(store_url) as conn:
        _ingest(conn, history + failed)
        (recorded,) = _judge(conn)
        assert len(recorded.opened) == 1
        kernels = conn.execute(
            "SELECT DISTINCT r.kernel_commit FROM serving_changes sc "
            "JOIN serving_runs r ON r.id IN (sc.run_pk, sc.previous_run_pk)"
        ).fetchall()
        assert not any(k.startswith("dead") for (k,) in kernels)


def test_a_provisional_step_is_settled_in_place(store_url):
    with psycopg.connect(store_url) as conn:
        history = nightly_history(STEP, FLAT)
        _ingest(conn, history[:23])
        (first,) = _judge(conn)
        ((provisional,),) = conn.execute("SELECT provisional FROM serving_changes").fetchall()
        assert provisional and len(first.opened) == 1
        assert "(provisional)" in list_regressions(conn)[0]["title"]
        _ingest(conn, history[23:])
        (later,) = _judge(conn)
        assert later.opened == () and later.new_changes == 0
        rows = conn.execute("SELECT provisional, regression_id FROM serving_changes").fetchall()
        assert rows == [(False, first.opened[0])]
