"""Issue 43: vLLM's and SGLang's serving benchmark files read into ServingRun records, and
every kind of bad file refused in one line naming it (serving/formats.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from serving_files import (
    METADATA,
    pytorch_records,
    requests,
    sglang_line,
    sglang_text,
    vllm_failed,
    vllm_result,
)

from kernelwatch.serving.formats import Given, ServingFileError, read_file, read_text
from kernelwatch.serving.results import Deployment, ServingRun

NOTHING = Given()
MTIME = "2026-12-02T03:00:00+00:00"
SGLANG_GIVEN = Given(deployment="chat-8b", model="llama-8b", gpu="H200", kernel_commit="0123abcd")


def _read(obj: object, given: Given = NOTHING, name: str = "result.json") -> list[ServingRun]:
    return read_text(json.dumps(obj), name, given, MTIME)


def test_a_vllm_result_is_one_run_of_the_deployment_its_metadata_names():
    result = vllm_result()
    (run,) = _read(result)
    assert run.source == "vllm" and run.status == "ok"
    assert run.deployment == Deployment(
        name="chat-8b", model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", gpu="H200",
        gpu_count=1, tp=1, ep=1, load="rate=inf concurrency=64", dataset="",
    )  # fmt: skip
    assert run.kernel_commit == "0123abcd"
    assert run.started_at == "2026-12-01T02:00:00+00:00"
    assert run.completed == result["completed"] and run.failed == 0
    assert run.duration_s == 10.0 and run.output_tokens == result["total_output_tokens"]
    for key in ("median_ttft_ms", "p99_tpot_ms", "p99_itl_ms", "mean_e2el_ms", "output_throughput"):
        assert run.metrics[key] == result[key]
    assert "request_goodput" not in run.metrics  # null unless --goodput
    assert run.samples == {}  # no --save-detailed
    # What the job wrote that is not the deployment is kept as text.
    assert run.extra["backend"] == "vllm" and run.extra["num_prompts"] == "40"
    assert ServingRun.from_json(json.loads(run.dumps())) == run


def test_detailed_arrays_give_each_completed_requests_latencies_in_ms():
    detailed = requests(n=10, tokens=5, failed=2)
    (run,) = _read(vllm_result(detailed, save_detailed=True))
    assert run.completed == 8 and run.failed == 2
    assert run.samples["ttft"] == pytest.approx([t * 1000 for t in detailed["ttfts"][:8]])
    gaps = [g * 1000 for gaps in detailed["itls"][:8] for g in gaps]
    assert run.samples["itl"] == pytest.approx(gaps) and len(gaps) == 8 * 4
    assert run.samples["tpot"] == pytest.approx(
        [1000 * sum(g) / len(g) for g in detailed["itls"][:8]]
    )
    assert run.samples["e2el"] == pytest.approx([t * 1000 for t in detailed["latencies"][:8]])
    # The per-request TPOT is vLLM's: its median is the file's median_tpot_ms.
    assert np.median(run.samples["tpot"]) == pytest.approx(run.metrics["median_tpot_ms"])


def test_appended_vllm_results_are_one_run_a_line_each_with_its_own_key():
    first = vllm_result(requests(seed=1), date="20261201-020000")
    second = vllm_result(requests(seed=2), date="20261202-020000")
    text = json.dumps(first) + "\n" + json.dumps(second) + "\n"
    runs = read_text(text, "append.jsonl", Given(), MTIME)
    assert [r.started_at[:10] for r in runs] == ["2026-12-01", "2026-12-02"]
    assert runs[0].key != runs[1].key
    # The same content read again is the same run: ingest skips it.
    assert [r.key for r in read_text(text, "copy.jsonl", Given(), MTIME)] == [r.key for r in runs]


def test_pytorch_format_records_are_one_run_with_a_metric_each():
    result = vllm_result()
    (run,) = _read(pytorch_records(result), name="result.pytorch.json")
    assert run.source == "vllm-pytorch" and run.status == "ok"
    assert run.deployment.model == result["model_id"] and run.deployment.name == "chat-8b"
    assert run.deployment.load == "rate=inf concurrency=64"
    for stat in ("median", "mean", "std", "p99"):
        for latency in ("ttft", "tpot", "itl"):
            key = f"{stat}_{latency}_ms"
            assert run.metrics[key] == result[key]
    assert run.completed == result["completed"]
    assert run.started_at == "2026-12-01T02:00:00+00:00"  # the date in extra_info


def test_sglang_lines_take_the_deployment_from_the_command_line():
    detailed = requests(seed=3)
    text = sglang_text(
        sglang_line(detailed, output_details=True), sglang_line(requests(seed=4), backend="vllm")
    )
    assert "Infinity" in text  # Python's json, as SGLang writes it
    given = Given(**{**SGLANG_GIVEN.__dict__, "started_at": "2026-12-01T02:00:00+00:00"})
    first, second = read_text(text, "sglang.jsonl", given, MTIME)
    assert first.source == "sglang" and first.status == "ok"
    assert first.deployment == Deployment(
        name="chat-8b", model="llama-8b", engine="sglang", gpu="H200",
        load="rate=inf concurrency=64", dataset="sharegpt",
    )  # fmt: skip
    assert second.deployment.engine == "vllm"  # SGLang's client against a vLLM server
    # e2e_latency is vLLM's e2el; the older version wrote no output_throughput.
    assert first.metrics["p99_e2el_ms"] == sglang_line(detailed)["p99_e2e_latency_ms"]
    assert first.metrics["output_throughput"] == pytest.approx(
        first.output_tokens / first.duration_s
    )
    assert first.metrics["p95_itl_ms"] > 0
    assert len(first.samples["ttft"]) == 40 and second.samples == {}
    # No time in the file and none given: the file's modification time.
    (run,) = read_text(sglang_text(sglang_line()), "s.jsonl", SGLANG_GIVEN, MTIME)
    assert run.started_at == MTIME


def test_a_failed_run_and_an_all_zero_run_are_read_as_failed():
    (failed,) = _read(vllm_failed())
    assert failed.status == "failed" and failed.completed == 0 and failed.failed == 20
    assert failed.samples == {}
    zeros = vllm_result()
    for key in list(zeros):
        if key.endswith(("_ms", "_throughput")):
            zeros[key] = 0.0
    (run,) = _read(zeros)
    assert run.status == "failed" and run.completed == 40


def test_a_value_given_on_the_command_line_fills_what_the_file_lacks():
    metadata = {k: v for k, v in METADATA.items() if k != "kernel_commit"}
    (run,) = _read(vllm_result(metadata=metadata), Given(kernel_commit="feedbeef", ep=2))
    assert run.kernel_commit == "feedbeef"
    assert (run.deployment.tp, run.deployment.ep, run.deployment.gpu_count) == (1, 2, 2)


@pytest.mark.parametrize(
    ("text", "given", "message"),
    [
        (json.dumps(vllm_result())[:300], Given(), "not JSON at line 1 column"),
        ('{"traceEvents": [], "schemaVersion": 1}', Given(), "a profiler trace (traceEvents)"),
        ('{"kind": "run", "schema_version": 1}\n{"kind": "measurement"}', Given(),
         "a kernelwatch run record"),
        ('[{"name": "x"}]', Given(), "not PyTorch benchmark records"),
        ("", Given(), "empty file"),
        (json.dumps({k: v for k, v in vllm_result().items() if not k.endswith("ttft_ms")}),
         Given(), "missing required metrics median_ttft_ms, p99_ttft_ms"),
        (json.dumps({k: v for k, v in vllm_result().items() if k != "completed"}), Given(),
         "missing required metrics completed"),
        (json.dumps(vllm_result(p99_itl_ms=-3.0)), Given(), "p99_itl_ms is -3.0"),
        (json.dumps(vllm_result(median_tpot_ms=float("nan"))), Given(), "median_tpot_ms is nan"),
        (json.dumps(vllm_result(requests(n=3, tokens=3), save_detailed=True,
                                itls=[[0.01, -0.02], [0.01, 0.01], [0.01, 0.01]])),
         Given(), "itls holds -0.02; a latency is a finite time >= 0"),
        (json.dumps(vllm_result(requests(n=3), save_detailed=True, ttfts=[0.1, float("nan"), 0.1])),
         Given(), "ttfts holds nan"),
        (json.dumps(vllm_result(requests(n=3), save_detailed=True, ttfts=[0.1])), Given(),
         "differ in length"),
        (json.dumps(vllm_result(metadata={})), Given(), "no deployment for the deployment: pass "
         "--deployment or have the benchmark write it (vllm bench serve --metadata deployment"),
        (json.dumps(vllm_result()), Given(gpu="B200"),
         "gpu is 'H200' in the file and 'B200' on the command line"),
        (json.dumps(vllm_result(tp="zero")), Given(), "tp is 'zero'; it is a count of 1 or more"),
        (json.dumps(vllm_result(date="yesterday")), Given(), "date is 'yesterday'"),
        (json.dumps(vllm_result()), Given(started_at="soon"), "started_at is 'soon'"),
        (sglang_text(sglang_line()), Given(), "no deployment for the deployment"),
    ],
    ids=["truncated", "trace", "kernelwatch-records", "other-list", "empty", "no-ttft",
         "no-completed", "negative-p99", "nan-median", "negative-itl", "nan-ttft",
         "ragged", "no-deployment", "conflict", "bad-tp", "bad-date", "bad-started-at",
         "sglang-no-deployment"],
)  # fmt: skip
def test_a_bad_file_is_one_line_naming_it(text, given, message):
    with pytest.raises(ServingFileError) as caught:
        read_text(text, "bad.json", given, MTIME)
    line = str(caught.value)
    assert "\n" not in line and line.startswith("bad.json")
    assert message in line


def test_a_binary_or_missing_file_is_one_line(tmp_path: Path):
    sqlite = tmp_path / "profile.sqlite"
    sqlite.write_bytes(b"SQLite format 3\x00\xff\xfe" + bytes(range(256)))
    with pytest.raises(ServingFileError, match=r"profile.sqlite: not a text file"):
        read_file(sqlite)
    with pytest.raises(ServingFileError, match=r"gone.json: cannot read it"):
        read_file(tmp_path / "gone.json")
