"""Records round-trip through their versioned JSON form and refuse what they cannot read."""

from __future__ import annotations

import json

import pytest

from kernelwatch.harness.records import (
    BuildMetrics,
    CaseId,
    CommitInfo,
    CorrectnessResult,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    Method,
    RecordError,
    RunInfo,
    SoftwareInfo,
    SpeedOfLight,
    Summary,
    Telemetry,
    read_record,
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


def _measurement() -> Measurement:
    return Measurement(
        case=CaseId("builtin", "rms_norm", "llm", {"rows": 4096, "hidden": 8192}, "bf16"),
        status="ok",
        reason="",
        method=Method("cuda-events", "cold", 1),
        device=DeviceInfo("cuda", "NVIDIA H200", "node-3", False, "GPU-1", "9.0", 132),
        software=SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.1"),
        config=LaunchConfig({"BLOCK": 1024}, 8, 1),
        samples_ns=(1000.0, 1010.0, 990.0),
        sm_clock_mhz=(1980.0, 1980.0, 1755.0),
        throttled=(False, False, True),
        summary=Summary(2, 1005.0, 1000.0, 1010.0, 1005.0, 1000.0, 1001.0, 1009.0, "budget", 0.005),
        telemetry=Telemetry(True, 1980.0, 3201.0, 41.0, 350.5, 0, 0),
        sol=SpeedOfLight(None, 3500.0, None, 72.9, 72.9, "memory", "datasheet"),
        baseline="torch",
        baseline_median_ns=1500.0,
        speedup=1.49,
    )


def test_measurement_build_and_run_round_trip_through_read_record():
    build = BuildMetrics(
        "builtin",
        "gemm",
        "gemm_kernel",
        "triton",
        "sm_90a",
        LaunchConfig({"BM": 128}, 8, 3),
        "ok",
        registers=122,
        tensor_core="HGMMA",
        opcodes={"HGMMA": 4},
    )
    run = RunInfo(
        "5d0c7c1e-0000-4000-8000-000000000000",
        "nightly",
        "kernels",
        "builtin",
        CommitInfo("abc", ("def",), "2026-11-30T00:00:00+00:00", "msg", "main"),
        _measurement().device,
        _measurement().software,
        "2026-11-30T00:00:00+00:00",
    )
    for record in (_measurement(), build, run):
        again = read_record(json.loads(record.dumps()))
        assert again == record
        assert type(again) is type(record)
    assert read_record(json.loads(run.dumps())).commit.parents == ("def",)


def test_read_record_refuses_unknown_kind_and_bad_trigger():
    with pytest.raises(RecordError, match="unknown record kind"):
        read_record({"kind": "mystery", "schema_version": 1})
    data = json.loads(_measurement().dumps())
    del data["method"]
    with pytest.raises(RecordError, match="malformed measurement"):
        read_record(data)
