"""Serving benchmark result files built key by key from the tools' documented fields
(../shared/reference/serving-results.md: vLLM's ``vllm/benchmarks/serve.py``, its PyTorch
benchmark-format sidecar, SGLang's ``bench_serving.py``), never from kernelwatch's own
writer, so a test of the parsers reads what the tools write.

Latencies here are what the tools write: summary metrics in ms, per-request arrays in s.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

LATENCIES = ("ttft", "tpot", "itl")
#: The deployment a vLLM job names with --metadata.
METADATA = {
    "deployment": "chat-8b",
    "kernel_commit": "0123abcd",
    "gpu": "H200",
    "tp": "1",
}


def _stats(values_ms: np.ndarray, prefix: str) -> dict[str, float]:
    return {
        f"mean_{prefix}_ms": float(np.mean(values_ms)),
        f"median_{prefix}_ms": float(np.median(values_ms)),
        f"std_{prefix}_ms": float(np.std(values_ms)),
        f"p99_{prefix}_ms": float(np.percentile(values_ms, 99)),
    }


def requests(
    n: int = 40,
    tokens: int = 16,
    ttft_s: float = 0.05,
    itl_s: float = 0.01,
    seed: int = 0,
    failed: int = 0,
) -> dict[str, list[Any]]:
    """``--save-detailed``'s per-request arrays: ``n`` requests of ``tokens`` output tokens,
    log-normal TTFTs and gaps around the given medians; the last ``failed`` requests failed
    (vLLM writes ttft 0, no gaps and an error message for them)."""
    rng = np.random.default_rng(seed)
    ttfts = (ttft_s * rng.lognormal(0.0, 0.1, n)).tolist()
    itls = [(itl_s * rng.lognormal(0.0, 0.1, tokens - 1)).tolist() for _ in range(n)]
    errors = [""] * n
    output_lens = [tokens] * n
    for i in range(n - failed, n):
        ttfts[i], itls[i], errors[i], output_lens[i] = 0.0, [], "Connection reset", 0
    latencies = [t + sum(gaps) for t, gaps in zip(ttfts, itls, strict=True)]
    return {
        "input_lens": [128] * n,
        "output_lens": output_lens,
        "ttfts": ttfts,
        "itls": itls,
        "generated_texts": ["x" * lens for lens in output_lens],
        "errors": errors,
        "start_times": [0.01 * i for i in range(n)],
        "latencies": latencies,
    }


def summary(detailed: Mapping[str, list[Any]], duration: float = 10.0) -> dict[str, Any]:
    """The summary keys vLLM computes from the requests that completed."""
    done = [i for i, error in enumerate(detailed["errors"]) if not error]

    def ms(values: list[float]) -> np.ndarray:
        # vLLM takes its statistics over [0] when no request completed.
        return np.array(values or [0.0]) * 1000

    ttft = ms([detailed["ttfts"][i] for i in done])
    itl = ms([gap for i in done for gap in detailed["itls"][i]])
    tpot = ms([float(np.mean(detailed["itls"][i])) for i in done])
    e2el = ms([detailed["latencies"][i] for i in done])
    output = sum(detailed["output_lens"][i] for i in done)
    return {
        "duration": duration,
        "completed": len(done),
        "failed": len(detailed["errors"]) - len(done),
        "total_input_tokens": 128 * len(done),
        "total_output_tokens": output,
        "request_throughput": len(done) / duration,
        "request_goodput": None,
        "output_throughput": output / duration,
        "total_token_throughput": (output + 128 * len(done)) / duration,
        **_stats(ttft, "ttft"),
        **_stats(tpot, "tpot"),
        **_stats(itl, "itl"),
        **_stats(e2el, "e2el"),
    }


def vllm_result(
    detailed: Mapping[str, list[Any]] | None = None,
    metadata: Mapping[str, str] = METADATA,
    date: str = "20261201-020000",
    save_detailed: bool = False,
    **overrides: Any,
) -> dict[str, Any]:
    """What ``vllm bench serve --save-result [--save-detailed] --metadata K=V...`` writes."""
    detailed = detailed if detailed is not None else requests()
    result: dict[str, Any] = {
        "date": date,
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": "meta-llama/Llama-3.1-8B-Instruct",
        "tokenizer_id": "meta-llama/Llama-3.1-8B-Instruct",
        "num_prompts": len(detailed["errors"]),
        **metadata,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 64,
        **summary(detailed),
        "max_output_tokens_per_s": 900.0,
        "max_concurrent_requests": 64,
        "rtfx": 0.0,
    }
    if save_detailed:
        result.update(detailed)
    result.update(overrides)
    return result


def vllm_failed(n: int = 20, metadata: Mapping[str, str] = METADATA) -> dict[str, Any]:
    """A vLLM run where every request failed: completed 0, totals, throughputs and every
    statistic 0.0 (numpy over [0])."""
    result = vllm_result(requests(n=n, failed=n), metadata)
    for key, value in result.items():
        if key.endswith(("_ms", "_throughput")) or key.startswith("total_"):
            result[key] = 0.0 if isinstance(value, float) else 0
    result.update(completed=0, failed=n, errors=["Connection refused"] * n)
    return result


def pytorch_records(result: Mapping[str, Any]) -> list[dict[str, Any]]:
    """vLLM's ``SAVE_TO_PYTORCH_BENCHMARK_FORMAT`` sidecar for ``result``: one record per
    present {median,mean,std,p99}_{ttft,tpot,itl}_ms, the other keys in extra_info."""
    args = {
        "model": result["model_id"],
        "request_rate": result["request_rate"],
        "max_concurrency": result["max_concurrency"],
        "num_prompts": result["num_prompts"],
    }
    skip = {"ttfts", "itls", "generated_texts", "errors"}
    names = [
        f"{stat}_{latency}_ms"
        for stat in ("median", "mean", "std", "p99")
        for latency in LATENCIES
        if f"{stat}_{latency}_ms" in result
    ]
    extra = {k: v for k, v in result.items() if k not in skip and k not in names}
    return [
        {
            "benchmark": {"name": "vLLM benchmark", "extra_info": {"args": args}},
            "model": {"name": result["model_id"]},
            "metric": {"name": name, "benchmark_values": [result[name]], "extra_info": extra},
        }
        for name in names
    ]


def sglang_line(
    detailed: Mapping[str, list[Any]] | None = None, output_details: bool = False, **over: Any
) -> dict[str, Any]:
    """One line of ``python -m sglang.bench_serving --output-file`` (the earlier version's
    keys: no output_throughput, e2e latency named ``e2e_latency``, ITL with p95)."""
    detailed = detailed if detailed is not None else requests()
    base = summary(detailed)
    line: dict[str, Any] = {
        "backend": "sglang",
        "dataset_name": "sharegpt",
        "request_rate": float("inf"),
        "max_concurrency": 64,
        "sharegpt_output_len": None,
        "random_input_len": 1024,
        "random_output_len": 1024,
        "random_range_ratio": 0.0,
        "duration": base["duration"],
        "completed": base["completed"],
        "total_input_tokens": base["total_input_tokens"],
        "total_output_tokens": base["total_output_tokens"],
        "total_output_tokens_retokenized": base["total_output_tokens"],
        "request_throughput": base["request_throughput"],
        "concurrency": 12.5,
        "accept_length": None,
    }
    for key, value in base.items():
        if key.endswith("_ms"):
            line[key.replace("_e2el_", "_e2e_latency_")] = value
    line["p95_itl_ms"] = line["p99_itl_ms"] * 0.9
    if output_details:
        line.update({k: detailed[k] for k in ("input_lens", "output_lens", "ttfts", "itls",
                                               "generated_texts", "errors")})  # fmt: skip
    line.update(over)
    return line


def sglang_text(*lines: Mapping[str, Any]) -> str:
    """JSON lines as SGLang writes them: Python's json, so an infinite rate is ``Infinity``."""
    return "".join(json.dumps(line) + "\n" for line in lines)


#: The first night of a seeded deployment history.
START = datetime(2026, 10, 20, 2, tzinfo=UTC)


def night(
    i: int, p99_tpot: float, throughput: float, deployment: str = "chat-8b"
) -> dict[str, Any]:
    """Night ``i``'s vLLM result: kernel commit ``{i:02d}c0ffee...``, the given p99 TPOT
    and output throughput, everything else from 12 seeded requests of one distribution."""
    metadata = {**METADATA, "deployment": deployment, "kernel_commit": f"{i:02d}" + "c0ffee" * 6}
    date = (START + timedelta(days=i)).strftime("%Y%m%d-%H%M%S")
    return vllm_result(requests(n=12, tokens=6, seed=i), metadata, date=date,
                       p99_tpot_ms=p99_tpot, output_throughput=throughput)  # fmt: skip


def nightly_history(
    p99_tpot: list[float], throughput: list[float], seed: int = 0
) -> list[dict[str, Any]]:
    """One result a night: the given levels of p99 TPOT and output throughput with 1%
    run-to-run noise."""
    rng = np.random.default_rng(seed)
    return [
        night(i, t * rng.lognormal(0, 0.01), r * rng.lognormal(0, 0.01))
        for i, (t, r) in enumerate(zip(p99_tpot, throughput, strict=True))
    ]
