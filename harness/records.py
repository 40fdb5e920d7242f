"""Typed records that flow harness -> store -> analysis, with a versioned JSON form.

Every record serialises to a JSON object carrying ``kind`` and ``schema_version``; readers
refuse a kind or version they do not know instead of guessing. This module imports neither
torch nor Triton so the parent process (CLI, store, analysis) stays light.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

SCHEMA_VERSION = 1

Verdict = Literal["pass", "fail", "error", "unsupported"]
VERDICTS: tuple[Verdict, ...] = ("pass", "fail", "error", "unsupported")


class RecordError(ValueError):
    """A JSON record that is malformed, of another kind, or of an unknown schema version."""


@dataclass(frozen=True)
class LaunchConfig:
    """One point of a kernel's tuning space: constexpr meta-parameters plus warps and stages."""

    meta: Mapping[str, int]
    num_warps: int = 4
    num_stages: int = 2

    def label(self) -> str:
        """A short stable text such as ``BLOCK_M=64,BLOCK_N=64,w4,s3``."""
        parts = [f"{k}={v}" for k, v in sorted(self.meta.items())]
        return ",".join([*parts, f"w{self.num_warps}", f"s{self.num_stages}"])

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchConfig:
        return cls(dict(data["meta"]), int(data["num_warps"]), int(data["num_stages"]))


@dataclass(frozen=True)
class SoftwareInfo:
    """Versions of everything between the kernel source and the hardware."""

    kernelwatch: str
    python: str
    torch: str
    triton: str
    cuda: str | None
    driver: str | None


@dataclass(frozen=True)
class DeviceInfo:
    """The device a record was produced on. ``kind`` is ``cuda`` or ``cpu``; on the CPU,
    ``interpreter`` says Triton ran through ``TRITON_INTERPRET=1``."""

    kind: str
    name: str
    host: str
    interpreter: bool
    uuid: str | None = None
    capability: str | None = None
    sm_count: int | None = None


@dataclass(frozen=True)
class CaseId:
    """What was checked: one kernel, one case of one workload, one dtype, from one suite."""

    suite: str
    kernel: str
    workload: str
    params: Mapping[str, int | float | str | bool]
    dtype: str

    def label(self) -> str:
        """The case parameters as compact text, e.g. ``m=33 n=40 k=48``."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())

    def key(self) -> str:
        """A stable hash of the identity (params in canonical order)."""
        canonical = json.dumps(
            [self.suite, self.kernel, self.workload, dict(self.params), self.dtype],
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CorrectnessResult:
    """The verdict for one case, with the evidence behind it.

    ``reason`` is empty on a pass and otherwise one line saying what was wrong;
    ``detail`` keeps a traceback or a crashed process's stderr tail.
    """

    case: CaseId
    verdict: Verdict
    reason: str
    tolerance: float
    seed: int
    device: DeviceInfo
    software: SoftwareInfo
    rel_error: float | None = None
    max_abs_error: float | None = None
    nonfinite: int = 0
    unwritten: int = 0
    deterministic: bool | None = None
    config: LaunchConfig | None = None
    duration_s: float = 0.0
    detail: str = ""
    kind: str = field(default="correctness", init=False)
    schema_version: int = field(default=SCHEMA_VERSION, init=False)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["case"]["params"] = dict(self.case.params)
        return data

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CorrectnessResult:
        _check_header(data, "correctness")
        try:
            fields = {k: v for k, v in data.items() if k not in ("kind", "schema_version")}
            fields["case"] = CaseId(**data["case"])
            fields["device"] = DeviceInfo(**data["device"])
            fields["software"] = SoftwareInfo(**data["software"])
            if data.get("config") is not None:
                fields["config"] = LaunchConfig.from_json(data["config"])
            if fields["verdict"] not in VERDICTS:
                raise RecordError(f"unknown verdict {fields['verdict']!r}")
            return cls(**fields)
        except (KeyError, TypeError) as exc:
            raise RecordError(f"malformed correctness record: {exc}") from exc


def _check_header(data: Mapping[str, Any], kind: str) -> None:
    if not isinstance(data, Mapping):
        raise RecordError(f"expected a JSON object, got {type(data).__name__}")
    if data.get("kind") != kind:
        raise RecordError(f"expected a {kind!r} record, got kind={data.get('kind')!r}")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise RecordError(
            f"{kind} record has schema_version={data.get('schema_version')!r}; this kernelwatch "
            f"reads version {SCHEMA_VERSION}: upgrade kernelwatch or re-run the producer"
        )
