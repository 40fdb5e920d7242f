"""The serving records: a deployment (the serving series' key) and one benchmark run of it,
with its summary metrics and, when the file had them, its per-request samples.

Every metric kernelwatch knows is declared here once, with its unit and the direction that
is better; the parsers, the store and the judge derive from this table. Summary metrics keep
vLLM's key names (``p99_tpot_ms``, ``output_throughput``); SGLang's ``e2e_latency`` is
vLLM's ``e2el``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from kernelwatch.harness.records import JsonRecord

RunStatus = Literal["ok", "failed"]
STATUSES: tuple[RunStatus, ...] = ("ok", "failed")

#: Per-request latencies, in ms once read: the quantities a summary metric summarises and
#: the per-request samples a run may carry.
LATENCIES = ("ttft", "tpot", "itl", "e2el")
#: Rates: higher is better.
THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput")
#: A summary latency metric's key: a statistic of one latency, in ms.
LATENCY_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")

#: What is judged per deployment: the latencies' median and p99, and the output rate
#: (metric -> lower is better). Every other stored metric is shown, not judged.
JUDGED: Mapping[str, bool] = {
    "median_ttft_ms": True,
    "p99_ttft_ms": True,
    "median_tpot_ms": True,
    "p99_tpot_ms": True,
    "median_itl_ms": True,
    "p99_itl_ms": True,
    "output_throughput": False,
}
#: A run's summary must hold these: TTFT is measured by every tool and version (TPOT and
#: ITL need a tokenizer in newer vLLM).
REQUIRED = ("median_ttft_ms", "p99_ttft_ms")


def lower_is_better(metric: str) -> bool:
    """The direction of ``metric``: latencies are better lower, throughputs higher."""
    if LATENCY_KEY.match(metric):
        return True
    if metric in THROUGHPUTS or metric == "request_goodput":
        return False
    raise ValueError(f"unknown serving metric {metric!r}")


@dataclass(frozen=True)
class Deployment:
    """The serving series' key: what was served, on what, under which load. A new kernel
    commit (or engine version) deployed is a new point of the same series, not a new one;
    ``load`` is ``rate=R`` (requests/s, ``inf`` for all at once) and/or ``concurrency=C``."""

    name: str
    model: str
    engine: str
    gpu: str
    gpu_count: int = 1
    tp: int = 1
    ep: int = 1
    load: str = ""
    dataset: str = ""

    def label(self) -> str:
        """A short text such as ``chat-70b: llama-70b on 8x H200 tp8 ep1 rate=inf``."""
        text = f"{self.name}: {self.model} ({self.engine}) on {self.gpu_count}x {self.gpu} "
        text += f"tp{self.tp} ep{self.ep}"
        return (
            text
            + (f" {self.load}" if self.load else "")
            + (f" {self.dataset}" if self.dataset else "")
        )


@dataclass(frozen=True)
class HistoryPoint:
    """One ok run's value of a metric, in a deployment's history."""

    run_pk: int
    started_at: datetime
    kernel_commit: str
    value: float


@dataclass(frozen=True)
class ServingRun(JsonRecord, kind="serving_run"):
    """One serving benchmark run of a deployment.

    ``key`` identifies the run's content (a digest of what the file said), so ingesting the
    same file again stores nothing. ``status`` is ``failed`` when no request completed or
    every metric is zero (vLLM writes a failed run's metrics as 0.0): such a run is kept,
    and never enters a baseline. ``metrics`` holds the summary (see ``LATENCY_KEY`` and
    ``THROUGHPUTS``); ``samples`` the per-request values in ms by latency (``itl`` every
    inter-token gap of the completed requests), empty when the file had none.
    ``started_at`` is an ISO 8601 time with its offset. ``simulated`` marks results a tool
    made up (the demo's), never measured.
    """

    key: str
    source: str
    deployment: Deployment
    kernel_commit: str
    started_at: str
    status: RunStatus
    completed: int
    failed: int
    duration_s: float
    input_tokens: int
    output_tokens: int
    metrics: Mapping[str, float]
    samples: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    engine_version: str = ""
    simulated: bool = False
    extra: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"ServingRun.status must be one of {STATUSES}, got {self.status!r}")
        for name, value in self.metrics.items():
            lower_is_better(name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} is {value}: a metric is a finite value >= 0")
        for name, values in self.samples.items():
            if name not in LATENCIES:
                raise ValueError(f"unknown per-request latency {name!r}; one of {LATENCIES}")
            if not all(math.isfinite(v) and v >= 0 for v in values):
                raise ValueError(f"per-request {name} holds a negative or non-finite value")
