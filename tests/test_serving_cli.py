"""Issue 43: `kernelwatch serving ingest` on a batch of files as a serving job drops them: the
good ones stored (once, however often the batch is ingested), each bad one a line of its own
and exit 2."""

from __future__ import annotations

import json

import psycopg
from serving_files import (
    METADATA,
    pytorch_records,
    requests,
    sglang_line,
    sglang_text,
    vllm_result,
)


def test_a_batch_stores_every_good_file_and_names_each_bad_one(
    kernelwatch_cli, store_url, tmp_path
):
    env = {"KERNELWATCH_DATABASE_URL": store_url}
    files = {
        "good.json": json.dumps(vllm_result(requests(seed=1), save_detailed=True)),
        "good.pytorch.json": json.dumps(pytorch_records(vllm_result(requests(seed=2)))),
        "truncated.json": json.dumps(vllm_result())[:500],
        "trace.json": json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel"}]}),
        "no-metrics.json": json.dumps({k: v for k, v in vllm_result().items() if "ttft" not in k}),
        "nan.json": json.dumps(vllm_result(p99_tpot_ms=float("nan"))),
        "no-deployment.json": json.dumps(
            vllm_result(metadata={k: v for k, v in METADATA.items() if k != "deployment"})
        ),
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    paths = [str(tmp_path / name) for name in files]

    proc = kernelwatch_cli("serving", "ingest", *paths, env=env)
    assert proc.returncode == 2, proc.stderr
    errors = proc.stderr.strip().splitlines()
    bad = ["truncated.json", "trace.json", "no-metrics.json", "nan.json", "no-deployment.json"]
    assert [line.split(": ", 2)[1] for line in errors] == [str(tmp_path / n) for n in bad]
    assert all(line.startswith("error: ") for line in errors)
    assert proc.stdout.count(": stored: ok run of chat-8b") == 2

    again = kernelwatch_cli("serving", "ingest", "--json", *paths[:2], env=env)
    assert again.returncode == 0, again.stderr
    assert [json.loads(line)["stored"] for line in again.stdout.splitlines()] == [False, False]

    # SGLang's lines say nothing of the deployment: the options do.
    (tmp_path / "sglang.jsonl").write_text(sglang_text(sglang_line(), sglang_line(completed=0)))
    options = ["--deployment", "chat-8b-sglang", "--model", "llama-8b", "--gpu", "H200",
               "--kernel-commit", "0123abcd", "--started-at", "2026-12-01T02:00:00"]  # fmt: skip
    sglang = kernelwatch_cli("serving", "ingest", *options, str(tmp_path / "sglang.jsonl"), env=env)
    assert sglang.returncode == 0, sglang.stderr
    assert "stored: failed run of chat-8b-sglang" in sglang.stdout

    with psycopg.connect(store_url) as conn:
        rows = conn.execute(
            "SELECT d.name, r.source, r.status FROM serving_runs r "
            "JOIN deployments d ON d.id = r.deployment_id ORDER BY r.id"
        ).fetchall()
    assert rows == [
        ("chat-8b", "vllm", "ok"),
        ("chat-8b", "vllm-pytorch", "ok"),
        ("chat-8b-sglang", "sglang", "ok"),
        ("chat-8b-sglang", "sglang", "failed"),
    ]
