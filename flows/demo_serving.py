"""The demo's serving results: what a serving benchmark of a deployment running the demo
repository's kernels would have written, in vLLM's ``--save-result`` format, marked
simulated (``--metadata simulated=true``): no model is served on a CPU.

After each night's nightly the deployment serves that night's head; a benchmark runs every
six hours. The numbers are made up around a decode step where RMSNorm's launches take 3% of
the time, so the night the culprit makes RMSNorm 3x slower, TPOT and ITL rise 6% and output
throughput falls as much; every run carries 1% of run-to-run noise (seeded). The files go
through the same reader, store and judge as any other (``flows/serving_results.py``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path

import numpy as np

#: The demo deployment, as a serving job's ``--metadata`` would name it.
METADATA = {
    "deployment": "kwdemo-chat",
    "gpu": "H200",
    "tp": "1",
    "dataset": "sharegpt",
    "simulated": "true",
}
MODEL = "kwdemo/chat-8b"
#: Benchmark runs a night, six hours apart from 06:00.
RUNS_PER_NIGHT = 4
#: How much slower a decode step is once the culprit ships: RMSNorm's 3% of a step, 3x.
CULPRIT_STEP = 1.0 + 0.03 * (3 - 1)
#: The clean levels: ms for latencies, tokens/s for the rate.
LEVELS = {"ttft": 85.0, "tpot": 14.0, "itl": 14.0, "output_throughput": 4300.0}
PROMPTS, INPUT_LEN, OUTPUT_LEN = 500, 512, 256


def write_results(
    folder: Path, nights: Sequence[tuple[date, str]], culprit_night: int, seed: int = 0
) -> list[Path]:
    """One vLLM result file per benchmark run of every night (``nights``: the demo's
    (day, head SHA) pairs), the culprit's head served from ``culprit_night`` on."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for night, (day, sha) in enumerate(nights):
        step = CULPRIT_STEP if night >= culprit_night else 1.0
        for run in range(RUNS_PER_NIGHT):
            at = datetime.combine(day, time(6), UTC) + timedelta(hours=6 * run)
            result = _result(at, sha, step, rng)
            path = folder / f"vllm-{at:%Y%m%d-%H%M%S}.json"
            path.write_text(json.dumps(result, indent=2) + "\n")
            paths.append(path)
    return paths


def _result(at: datetime, sha: str, step: float, rng: np.random.Generator) -> dict[str, object]:
    noise = float(rng.lognormal(0.0, 0.01))
    tpot = LEVELS["tpot"] * step * noise
    itl = LEVELS["itl"] * step * noise
    ttft = LEVELS["ttft"] * float(rng.lognormal(0.0, 0.01))
    rate = LEVELS["output_throughput"] / (step * noise)
    duration = PROMPTS * OUTPUT_LEN / rate
    result: dict[str, object] = {
        "date": at.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": "openai",
        "backend": "vllm",
        "label": None,
        "model_id": MODEL,
        "tokenizer_id": MODEL,
        "num_prompts": PROMPTS,
        **METADATA,
        "kernel_commit": sha,
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": 64,
        "duration": duration,
        "completed": PROMPTS,
        "failed": 0,
        "total_input_tokens": PROMPTS * INPUT_LEN,
        "total_output_tokens": PROMPTS * OUTPUT_LEN,
        "request_throughput": PROMPTS / duration,
        "output_throughput": rate,
        "total_token_throughput": PROMPTS * (INPUT_LEN + OUTPUT_LEN) / duration,
    }
    # vLLM's statistics of each latency: mean, median, std and p99 in ms, the tail a
    # fixed multiple of the median here (a simulation, not a distribution).
    for name, median, tail in (("ttft", ttft, 2.6), ("tpot", tpot, 1.3), ("itl", itl, 2.1)):
        result |= {
            f"mean_{name}_ms": median * 1.05,
            f"median_{name}_ms": median,
            f"std_{name}_ms": median * 0.2,
            f"p99_{name}_ms": median * tail,
        }
    return result
