"""Records round-trip through their versioned JSON form and refuse what they cannot read."""

from __future__ import annotations

import json

import pytest

from kernelwatch.harness.records import (
    CaseId,
    CorrectnessResult,
    DeviceInfo,
    LaunchConfig,
    RecordError,
    SoftwareInfo,
)


def _record(**overrides) -> CorrectnessResult:
    fields = {
        "case": CaseId("builtin", "gemm", "smoke", {"m": 33, "n": 40, "k": 48}, "fp16"),
        "verdict": "pass",
        "reason": "",
        "tolerance": 2e-3,
        "seed": 7,
        "device": DeviceInfo("cuda", "NVIDIA H200", "node-3", False, "GPU-1", "9.0", 132),
        "software": SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.1"),
        "rel_error": 1.5e-4,
        "max_abs_error": 2e-3,
        "deterministic": True,
        "config": LaunchConfig({"BLOCK_M": 64, "BLOCK_N": 128}, 8, 3),
    }
    return CorrectnessResult(**{**fields, **overrides})


def test_round_trip():
    record = _record()
    again = CorrectnessResult.from_json(json.loads(record.dumps()))
    assert again == record
    assert again.config.label() == "BLOCK_M=64,BLOCK_N=128,w8,s3"


def test_header_is_versioned():
    data = _record().to_json()
    assert (data["kind"], data["schema_version"]) == ("correctness", 1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 99}, "schema_version=99; this kernelwatch reads version 1"),
        ({"kind": "measurement"}, "expected a 'correctness' record, got kind='measurement'"),
        ({"verdict": "maybe"}, "unknown verdict 'maybe'"),
        ({"case": {"kernel": "gemm"}}, "malformed correctness record"),
    ],
)
def test_bad_records_are_refused(change, message):
    data = {**_record().to_json(), **change}
    with pytest.raises(RecordError, match=message):
        CorrectnessResult.from_json(data)


def test_case_key_ignores_param_order():
    a = CaseId("s", "k", "w", {"m": 1, "n": 2}, "fp16")
    b = CaseId("s", "k", "w", {"n": 2, "m": 1}, "fp16")
    assert a.key() == b.key()
    assert a.key() != CaseId("s", "k", "w", {"m": 1, "n": 3}, "fp16").key()
