"""Issue 43: serving runs in PostgreSQL (store/serving.py): idempotent ingest, the per-request
samples COPY'd and read back, failed runs stored but never a baseline."""

from __future__ import annotations

import json

import numpy as np
import psycopg
import pytest
from serving_files import METADATA, requests, vllm_failed, vllm_result

from kernelwatch.serving.formats import Given, read_text
from kernelwatch.serving.results import ServingRun
from kernelwatch.store import serving

MTIME = "2026-12-02T03:00:00+00:00"


def _run(obj: object) -> ServingRun:
    (run,) = read_text(json.dumps(obj), "result.json", Given(), MTIME)
    return run


def _night(day: int, commit: str, **over: object) -> ServingRun:
    metadata = {**METADATA, "kernel_commit": commit}
    detailed = requests(n=12, tokens=6, seed=day)
    return _run(vllm_result(detailed, metadata, date=f"202612{day:02d}-020000",
                            save_detailed=True, **over))  # fmt: skip


def test_ingest_again_stores_nothing_twice(store_url):
    first, second = _night(1, "aaaa"), _night(2, "bbbb")
    with psycopg.connect(store_url) as conn:
        stored = [serving.ingest(conn, run) for run in (first, second, first)]
        assert [s.stored for s in stored] == [True, True, False]
        assert stored[2].run_pk == stored[0].run_pk
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM serving_runs), (SELECT count(*) FROM deployments), "
            "(SELECT count(*) FROM serving_metrics), (SELECT count(*) FROM serving_samples)"
        ).fetchone()
        # One deployment: a new kernel commit is a new run of it, not a new series.
        assert counts == (2, 1, 2 * len(first.metrics), 2 * 4)
        assert serving.runs(conn, [first.key, "nope"]) == {first.key: "ok"}


def test_samples_and_metrics_read_back_as_ingested(store_url):
    run = _night(3, "cccc")
    with psycopg.connect(store_url) as conn:
        pk = serving.ingest(conn, run).run_pk
        for latency, values in run.samples.items():
            back = serving.samples(conn, pk, latency)
            assert back is not None and back.size == len(values)
            # float4 storage: 7 significant digits, far below any latency's noise.
            np.testing.assert_allclose(back, values, rtol=1e-6)
        assert serving.samples(conn, pk, "nothing") is None
        ((deployment_id, deployment),) = serving.deployments(conn)
        assert deployment == run.deployment
        (point,) = serving.history(conn, deployment_id, "p99_tpot_ms")
        assert point.value == run.metrics["p99_tpot_ms"] and point.kernel_commit == "cccc"
        extra = conn.execute("SELECT extra FROM serving_runs WHERE id = %s", (pk,)).fetchone()[0]
        assert extra["backend"] == "vllm"


def test_a_failed_or_all_zero_run_is_stored_but_never_in_a_history(store_url):
    zeros = vllm_result(metadata={**METADATA, "kernel_commit": "zero"}, date="20261204-020000")
    for key in list(zeros):
        if key.endswith(("_ms", "_throughput")):
            zeros[key] = 0.0
    runs = [
        _night(1, "aaaa"),
        _run(vllm_failed(metadata={**METADATA, "kernel_commit": "dead"})),
        _night(3, "bbbb"),
        _run(zeros),
    ]
    with psycopg.connect(store_url) as conn:
        for run in runs:
            serving.ingest(conn, run)
        statuses = conn.execute(
            "SELECT kernel_commit, status FROM serving_runs ORDER BY started_at"
        ).fetchall()
        assert sorted(statuses) == [("aaaa", "ok"), ("bbbb", "ok"), ("dead", "failed"),
                                    ("zero", "failed")]  # fmt: skip
        ((deployment_id, _),) = serving.deployments(conn)
        for metric in ("median_ttft_ms", "output_throughput"):
            history = serving.history(conn, deployment_id, metric)
            assert [p.kernel_commit for p in history] == ["aaaa", "bbbb"]


def test_the_store_refuses_a_negative_metric_whoever_writes_it(store_url):
    run = _night(1, "aaaa")
    with psycopg.connect(store_url) as conn:
        pk = serving.ingest(conn, run).run_pk
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE serving_metrics SET value = -1 WHERE run_pk = %s", (pk,))
