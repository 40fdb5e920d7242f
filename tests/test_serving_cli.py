"""Issue 43: `kernelwatch serving ingest` on a batch of files as a serving job drops them: the
good ones stored (once, however often the batch is ingested), each bad one a line of its own
and exit 2."""

from __future__ import annotations

import json

import psycopg
from serving_files import (
    METADATA,
    nightly_history,
    pytorch_records,
    requests,
    sglang_line,
    sglang_text,
    vllm_result,
)
from trace_files import STEP, chrome_trace, cpu_only_trace, write_json


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
    # Each line is keyed by its own content, so a second ingest of the file stores neither.
    sglang_again = kernelwatch_cli(
        "serving", "ingest", "--json", *options, str(tmp_path / "sglang.jsonl"), env=env
    )
    assert sglang_again.returncode == 0, sglang_again.stderr
    assert [json.loads(line)["stored"] for line in sglang_again.stdout.splitlines()] == [
        False,
        False,
    ]

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


def test_a_stepped_history_is_judged_listed_shown_and_compared(
    kernelwatch_cli, store_url, tmp_path
):
    env = {"KERNELWATCH_DATABASE_URL": store_url}
    history = nightly_history([20.0] * 20 + [21.2] * 15, [5000.0] * 35)
    # The last two nights ran with --save-detailed: their per-request samples are stored.
    for i, result in enumerate(history[-2:], start=len(history) - 2):
        result.update(requests(n=40, seed=i))
    paths = []
    for i, result in enumerate(history):
        paths.append(tmp_path / f"night-{i:02d}.json")
        paths[-1].write_text(json.dumps(result))
    ingest = kernelwatch_cli("serving", "ingest", "--json", *map(str, paths), env=env)
    assert ingest.returncode == 0, ingest.stderr
    run_pks = [json.loads(line)["run_pk"] for line in ingest.stdout.splitlines()]

    detect = kernelwatch_cli("serving", "detect", "--json", env=env)
    assert detect.returncode == 0, detect.stderr
    (judged,) = [json.loads(line) for line in detect.stdout.splitlines()]
    (regression_id,) = judged["opened"]
    (change,) = judged["changes"]
    assert (change["metric"], change["direction"]) == ("p99_tpot_ms", "regression")
    assert change["kernel_commit"].startswith("20") and change["run_pk"] == run_pks[20]

    listed = kernelwatch_cli("regressions", "list", "--json", env=env)
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert (row["regression_id"], row["kind"]) == (regression_id, "serving")
    shown = kernelwatch_cli("regressions", "show", str(regression_id), env=env)
    assert shown.returncode == 0, shown.stderr
    assert "serving metrics that moved" in shown.stdout and "p99_tpot_ms" in shown.stdout
    acked = kernelwatch_cli("regressions", "ack", str(regression_id), "--note", "looking", env=env)
    assert acked.returncode == 0, acked.stderr

    again = kernelwatch_cli("serving", "detect", env=env)
    assert again.returncode == 0 and "opened" not in again.stdout

    compared = kernelwatch_cli("serving", "compare", "--json", *map(str, run_pks[-2:]), env=env)
    assert compared.returncode == 0, compared.stderr
    verdicts = [json.loads(line) for line in compared.stdout.splitlines()]
    assert {(v["latency"], v["statistic"]) for v in verdicts} == {
        (lat, stat) for lat in ("ttft", "tpot", "itl", "e2el") for stat in ("p50", "p99")
    }
    assert all(v["n_a"] > 0 and v["verdict"] != "ERROR" for v in verdicts)

    no_samples = kernelwatch_cli("serving", "compare", str(run_pks[0]), str(run_pks[-1]), env=env)
    assert no_samples.returncode == 2
    assert no_samples.stderr.startswith("error: cannot compare runs") and "--save-detailed" in (
        no_samples.stderr
    )
    unknown = kernelwatch_cli("serving", "detect", "--deployment", "nope", env=env)
    assert unknown.returncode == 2 and unknown.stderr.count("\n") == 1


def test_a_run_ingested_with_its_trace_and_a_bad_trace_loses_nothing(
    kernelwatch_cli, store_url, tmp_path
):
    env = {"KERNELWATCH_DATABASE_URL": store_url}
    result = tmp_path / "result.json"
    result.write_text(json.dumps(vllm_result(requests(seed=3))))
    trace = write_json(tmp_path / "step.pt.trace.json", chrome_trace())
    proc = kernelwatch_cli("serving", "ingest", str(result), "--trace", str(trace), env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"kernels, {sum(k.dur_ns * k.launches for k in STEP) / 1e6:.3f} ms" in proc.stderr

    other = tmp_path / "other.json"
    other.write_text(json.dumps(vllm_result(requests(seed=4), date="20261202-020000")))
    cpu = write_json(tmp_path / "cpu.json", cpu_only_trace())
    bad = kernelwatch_cli("serving", "ingest", str(other), "--trace", str(cpu), env=env)
    assert bad.returncode == 2
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(f"error: {cpu}: ") and "CPU-only profile" in line
    assert "stored: ok run" in bad.stdout  # the run itself is kept

    two = kernelwatch_cli("serving", "ingest", str(result), str(other), "--trace", str(trace),
                          env=env)  # fmt: skip
    assert two.returncode == 2 and "--trace belongs to one run" in two.stderr
    with psycopg.connect(store_url) as conn:
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM serving_runs), (SELECT count(*) FROM serving_traces),"
            " (SELECT count(*) FROM serving_trace_kernels)"
        ).fetchone()
    assert counts == (2, 1, len(STEP))
