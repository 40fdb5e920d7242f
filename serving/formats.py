"""Reading the files serving benchmarks write into :class:`ServingRun` records.

Three formats, told apart by their keys (docs/SERVING.md has an example of each):

- vLLM's ``vllm bench serve --save-result``: one JSON object (``--append-result``: one per
  line), always with ``date``; ``--metadata KEY=VALUE`` pairs are top-level keys;
  ``--save-detailed`` adds per-request arrays (``ttfts``, ``itls``, ``errors``, ...).
- vLLM's PyTorch benchmark-format sidecar (``SAVE_TO_PYTORCH_BENCHMARK_FORMAT=1``): a JSON
  list, one record per metric (``benchmark``, ``model``, ``metric``); the other result
  keys are in each metric's ``extra_info``, the command's arguments in the benchmark's.
- SGLang's ``python -m sglang.bench_serving``: one JSON object per line (``request_rate``
  may be a bare ``Infinity``), with ``dataset_name``; ``--output-details`` adds the
  per-request arrays.

What a file does not say of its deployment (SGLang's has no metadata; vLLM's has what the
job passed with ``--metadata``) comes from :class:`Given` (the command's options); a value
given both ways must agree. Every problem is one :class:`ServingFileError` line naming the
file and what to do; a file is read whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kernelwatch.serving.results import (
    LATENCY_KEY,
    REQUIRED,
    THROUGHPUTS,
    Deployment,
    ServingRun,
)

VLLM, VLLM_PYTORCH, SGLANG = "vllm", "vllm-pytorch", "sglang"
#: vLLM's ``date`` key (the benchmark host's clock, read as UTC).
_VLLM_DATE = "%Y%m%d-%H%M%S"
#: Keys read into the run's own fields or samples, not kept in ``extra``.
_DETAILED = ("ttfts", "itls", "errors", "latencies", "input_lens", "output_lens",
             "start_times", "generated_texts", "queue_times")  # fmt: skip
_COUNTS = ("completed", "duration")
_EXTRA_CHARS = 200


class ServingFileError(ValueError):
    """A file that cannot be read as a serving result: one line, naming the file."""


@dataclass(frozen=True)
class Given:
    """What the command line says of the runs' deployment; ``None``: take it from the file.
    ``started_at`` (ISO 8601) is for files that record no time (SGLang's): without it their
    time is the file's modification time."""

    deployment: str | None = None
    model: str | None = None
    engine: str | None = None
    engine_version: str | None = None
    gpu: str | None = None
    gpu_count: int | None = None
    tp: int | None = None
    ep: int | None = None
    dataset: str | None = None
    kernel_commit: str | None = None
    started_at: str | None = None
    simulated: bool = False


def read_file(path: Path, given: Given = Given()) -> list[ServingRun]:
    """Every run in the file at ``path``; :class:`ServingFileError` if any part is bad."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ServingFileError(f"{path}: not a text file (a serving result is JSON)") from None
    except OSError as exc:
        raise ServingFileError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC).isoformat()
    return read_text(text, str(path), given, mtime)


def read_text(text: str, name: str, given: Given, mtime: str) -> list[ServingRun]:
    """The runs in ``text`` (the contents of the file called ``name``)."""
    if not text.strip():
        raise ServingFileError(f"{name}: empty file")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None
        lines = [(i, line) for i, line in enumerate(text.splitlines(), 1) if line.strip()]
        if len(lines) == 1:
            _loads(lines[0][1], f"{name}")  # raises, naming where it stopped
        objects = [(f"{name}:{i}", _loads(line, f"{name}:{i}")) for i, line in lines]
    else:
        objects = [(name, whole)]
    if isinstance(whole, list):
        return [_from_pytorch(whole, name, given, mtime)]
    return [_from_object(obj, where, given, mtime) for where, obj in objects]


def _loads(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise ServingFileError(
            f"{where}: not JSON at line {exc.lineno} column {exc.colno} ({exc.msg}); "
            "a truncated file? write it again"
        ) from None


def _from_object(obj: Any, where: str, given: Given, mtime: str) -> ServingRun:
    if not isinstance(obj, dict):
        raise ServingFileError(f"{where}: a JSON {type(obj).__name__}, not a serving result")
    if "date" in obj and ("model_id" in obj or "backend" in obj):
        return _run(obj, VLLM, where, given, mtime, obj)
    if "dataset_name" in obj and "backend" in obj:
        result = {_vllm_name(k): v for k, v in obj.items()}
        return _run(result, SGLANG, where, given, mtime, obj)
    raise ServingFileError(
        f"{where}: {_what_else(obj)}, not a serving benchmark result of vLLM "
        "(vllm bench serve --save-result) or SGLang (bench_serving)"
    )


def _what_else(obj: Mapping[str, Any]) -> str:
    if "traceEvents" in obj:
        return "a profiler trace (traceEvents)"
    if "kind" in obj and "schema_version" in obj:
        return f"a kernelwatch {obj['kind']} record"
    return f"a JSON object with keys {', '.join(sorted(map(str, obj))[:6])}"


def _vllm_name(key: str) -> str:
    # SGLang's end-to-end latency is vLLM's e2el.
    return key.replace("_e2e_latency_ms", "_e2el_ms")


def _from_pytorch(records: list[Any], where: str, given: Given, mtime: str) -> ServingRun:
    shaped = all(
        isinstance(r, dict) and isinstance(r.get("metric"), dict) and "benchmark" in r
        for r in records
    )
    if not records or not shaped:
        raise ServingFileError(
            f"{where}: a JSON list that is not PyTorch benchmark records (each with "
            "benchmark, model and metric)"
        )
    result: dict[str, Any] = {}
    for record in records:
        metric = record["metric"]
        result.update(metric.get("extra_info") or {})
        values = metric.get("benchmark_values")
        if not isinstance(values, list) or len(values) != 1:
            raise ServingFileError(
                f"{where}: metric {metric.get('name')!r} has benchmark_values {values!r}; "
                "vLLM writes one value per metric"
            )
        result[str(metric.get("name"))] = values[0]
    args = ((records[0]["benchmark"].get("extra_info") or {}).get("args")) or {}
    for key in ("request_rate", "max_concurrency"):
        result.setdefault(key, args.get(key))
    model = (records[0].get("model") or {}).get("name")
    if model is not None:
        result.setdefault("model_id", model)
    return _run(result, VLLM_PYTORCH, where, given, mtime, records)


def _run(
    result: Mapping[str, Any], source: str, where: str, given: Given, mtime: str, raw: Any
) -> ServingRun:
    said = _Said(result, where, given)
    metrics = _metrics(result, where)
    completed, duration = (_number(result, key, where) for key in _COUNTS)
    failed = int(_number(result, "failed", where)) if "failed" in result else 0
    output_tokens = int(_number(result, "total_output_tokens", where, default=0.0))
    if "output_throughput" not in metrics and duration > 0:
        metrics["output_throughput"] = output_tokens / duration
    status = "failed" if completed == 0 or not any(metrics.values()) else "ok"
    missing = [key for key in REQUIRED if key not in metrics]
    if status == "ok" and missing:
        raise ServingFileError(
            f"{where}: missing required metrics {', '.join(missing)}; run the benchmark "
            "with its default --percentile-metrics"
        )
    if given.started_at is not None:
        started = _iso_time(given.started_at, where)
    else:
        started = _vllm_date(result["date"], where) if "date" in result else mtime
    # SGLang's client benchmarks other engines too: its backend is the engine served.
    engine = str(result.get("backend") or SGLANG) if source == SGLANG else "vllm"
    tp, ep = said.count("tp", default=1), said.count("ep", default=1)
    deployment = Deployment(
        name=said.text("deployment"),
        model=said.text("model", fallbacks=("model_id",), nested=("server_info", "model_path")),
        engine=said.text("engine", default=engine),
        gpu=said.text("gpu"),
        gpu_count=said.count("gpu_count", default=None) or tp * ep,
        tp=tp,
        ep=ep,
        load=_load(result),
        dataset=said.text("dataset", fallbacks=("dataset_name",), default=""),
    )
    digest = hashlib.sha256(
        json.dumps([source, raw], sort_keys=True, default=str).encode()
    ).hexdigest()
    return ServingRun(
        key=digest,
        source=source,
        deployment=deployment,
        kernel_commit=said.text("kernel_commit"),
        started_at=started,
        status=status,
        completed=int(completed),
        failed=failed,
        duration_s=duration,
        input_tokens=int(_number(result, "total_input_tokens", where, default=0.0)),
        output_tokens=output_tokens,
        metrics=metrics,
        samples=_samples(result, where) if status == "ok" else {},
        engine_version=said.text("engine_version", default=""),
        simulated=given.simulated or str(result.get("simulated", "")).lower() == "true",
        extra=_extra(result, said.used),
    )


class _Said:
    """A deployment field from the file's metadata, or else the command line: required
    unless a default is given; the two must agree when both say it."""

    def __init__(self, result: Mapping[str, Any], where: str, given: Given) -> None:
        self.result, self.where, self.given = result, where, given
        self.used: set[str] = set()

    def _value(self, key: str, fallbacks: Sequence[str], nested: tuple[str, str] | None) -> Any:
        for name in (key, *fallbacks):
            if self.result.get(name) not in (None, ""):
                self.used.add(name)
                return self.result[name]
        if nested is not None and isinstance(self.result.get(nested[0]), dict):
            return self.result[nested[0]].get(nested[1])
        return None

    def text(
        self,
        key: str,
        fallbacks: Sequence[str] = (),
        nested: tuple[str, str] | None = None,
        default: str | None = None,
    ) -> str:
        found = self._value(key, fallbacks, nested)
        option = getattr(self.given, key)
        if found is not None and option is not None and str(found) != str(option):
            raise ServingFileError(
                f"{self.where}: {key} is {found!r} in the file and {option!r} on the command "
                "line; drop the option or fix the file"
            )
        value = found if found is not None else option
        if value is None:
            if default is not None:
                return default
            raise ServingFileError(
                f"{self.where}: no {key} for the deployment: pass --{key.replace('_', '-')} or "
                f"have the benchmark write it (vllm bench serve --metadata {key}=...)"
            )
        return str(value)

    def count(self, key: str, default: int | None) -> int:
        text = self.text(key, default="" if default is None else str(default))
        if text == "":
            return 0
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise ServingFileError(f"{self.where}: {key} is {text!r}; it is a count of 1 or more")
        return value


def _number(result: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = result.get(key)
    if value is None:
        if default is not None:
            return default
        raise ServingFileError(f"{where}: missing required metrics {key}; not a complete result")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ServingFileError(f"{where}: {key} is {value!r}, not a number")
    if not math.isfinite(value) or value < 0:
        raise ServingFileError(f"{where}: {key} is {value}; it must be a finite value >= 0")
    return float(value)


def _metrics(result: Mapping[str, Any], where: str) -> dict[str, float]:
    found = {}
    for key, value in result.items():
        if LATENCY_KEY.match(key) or ((key in THROUGHPUTS or key == "request_goodput")
                                      and value is not None):  # fmt: skip
            found[key] = _number(result, key, where)
    return found


def _vllm_date(value: Any, where: str) -> str:
    try:
        return datetime.strptime(str(value), _VLLM_DATE).replace(tzinfo=UTC).isoformat()
    except ValueError:
        raise ServingFileError(
            f"{where}: date is {value!r}; vLLM writes it as YYYYMMDD-HHMMSS"
        ) from None


def _iso_time(text: str, where: str) -> str:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ServingFileError(
            f"{where}: started_at is {text!r}; give an ISO 8601 time such as "
            "2026-12-01T02:00:00+00:00"
        ) from None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).isoformat()


def _load(result: Mapping[str, Any]) -> str:
    parts = []
    rate = result.get("request_rate")
    if rate is not None:
        number = float(rate) if not isinstance(rate, bool) else math.nan
        parts.append("rate=inf" if math.isinf(number) else f"rate={number:g}")
    if result.get("max_concurrency") is not None:
        parts.append(f"concurrency={result['max_concurrency']}")
    return " ".join(parts)


def _samples(result: Mapping[str, Any], where: str) -> dict[str, tuple[float, ...]]:
    """The completed requests' latencies in ms, from ``--save-detailed``'s arrays: each
    request's TTFT, its inter-token gaps (all of them, for ITL), its time per output token
    (vLLM's definition: the gaps' mean) and, when written, its end-to-end latency."""
    ttfts, itls = result.get("ttfts"), result.get("itls")
    if not isinstance(ttfts, list) or not isinstance(itls, list):
        return {}
    errors = result.get("errors") or [""] * len(ttfts)
    latencies = result.get("latencies")
    arrays = [ttfts, itls, errors, *([latencies] if isinstance(latencies, list) else [])]
    if len({len(a) for a in arrays}) != 1:
        raise ServingFileError(
            f"{where}: the per-request arrays (ttfts, itls, errors, latencies) differ in "
            "length; the file is damaged"
        )
    done = [i for i, error in enumerate(errors) if not error]
    samples: dict[str, list[float]] = {"ttft": [], "tpot": [], "itl": []}
    if isinstance(latencies, list):
        samples["e2el"] = [_ms(latencies[i], "latencies", where) for i in done]
    for i in done:
        samples["ttft"].append(_ms(ttfts[i], "ttfts", where))
        gaps = itls[i] if isinstance(itls[i], list) else [itls[i]]
        gaps_ms = [_ms(gap, "itls", where) for gap in gaps]
        samples["itl"] += gaps_ms
        if gaps_ms:
            samples["tpot"].append(sum(gaps_ms) / len(gaps_ms))
    return {name: tuple(values) for name, values in samples.items() if values}


def _ms(seconds: Any, key: str, where: str) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ServingFileError(f"{where}: {key} holds {seconds!r}, not a time in seconds")
    if not math.isfinite(seconds) or seconds < 0:
        raise ServingFileError(f"{where}: {key} holds {seconds}; a latency is a finite time >= 0")
    return float(seconds) * 1000.0


def _extra(result: Mapping[str, Any], used: set[str]) -> dict[str, str]:
    """The file's other scalar keys (backend, label, num_prompts, metadata the deployment
    does not use), as text, so nothing the job wrote is lost."""
    skip = {*used, *_DETAILED, *_COUNTS, "date", "failed", "total_input_tokens",
            "total_output_tokens"}  # fmt: skip
    return {
        key: str(value)[:_EXTRA_CHARS]
        for key, value in result.items()
        if key not in skip
        and not LATENCY_KEY.match(key)
        and key not in THROUGHPUTS
        and isinstance(value, str | int | float | bool)
    }
