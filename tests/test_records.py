"""Records round-trip through their versioned JSON form and refuse what they cannot read."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    CommitInfo,
    CorrectnessResult,
    LaunchConfig,
    Measurement,
    RecordError,
    RunInfo,
    SpeedOfLight,
    Summary,
    Telemetry,
    in_family,
    read_record,
)
from kernelwatch.store.runfile import read_run_file, write_run_file


@pytest.fixture
def check(make_correctness) -> CorrectnessResult:
    return make_correctness(
        CaseId("builtin", "gemm", "smoke", {"m": 33, "n": 40, "k": 48}, "fp16"),
        config=LaunchConfig({"BLOCK_M": 64, "BLOCK_N": 128}, 8, 3),
    )


@pytest.fixture
def timed(make_measurement) -> Measurement:
    """A measurement with every part filled: throttled samples, telemetry, SOL, baseline."""
    return make_measurement(
        CaseId("builtin", "rms_norm", "llm", {"rows": 4096, "hidden": 8192}, "bf16"),
        sm_clock_mhz=(1980.0, 1980.0, 1755.0),
        throttled=(False, False, True),
        summary=Summary(2, 1005.0, 1000.0, 1010.0, 1005.0, 1000.0, 1001.0, 1009.0, "budget", 0.005),
        telemetry=Telemetry(True, 1980.0, 3201.0, 41.0, 350.5, 0, 0),
        sol=SpeedOfLight(None, 3500.0, None, 72.9, 72.9, "memory", "datasheet"),
        baseline="torch",
        baseline_median_ns=1500.0,
        speedup=1.49,
    )


def test_round_trip(check):
    again = CorrectnessResult.from_json(json.loads(check.dumps()))
    assert again == check
    assert again.config.label() == "BLOCK_M=64,BLOCK_N=128,w8,s3"


def test_header_is_versioned(check):
    data = check.to_json()
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
def test_bad_records_are_refused(check, change, message):
    data = {**check.to_json(), **change}
    with pytest.raises(RecordError, match=message):
        CorrectnessResult.from_json(data)


def test_case_key_ignores_param_order():
    a = CaseId("s", "k", "w", {"m": 1, "n": 2}, "fp16")
    b = CaseId("s", "k", "w", {"n": 2, "m": 1}, "fp16")
    assert a.key() == b.key()
    assert a.key() != CaseId("s", "k", "w", {"m": 1, "n": 3}, "fp16").key()


def test_measurement_build_and_run_round_trip_through_read_record(timed, make_build, make_run_info):
    build = make_build(
        kernel="gemm",
        function="gemm_kernel",
        config=LaunchConfig({"BM": 128}, 8, 3),
        registers=122,
        tensor_core="HGMMA",
        opcodes={"HGMMA": 4},
    )
    run = make_run_info(
        commit=CommitInfo("abc", ("def",), "2026-11-30T00:00:00+00:00", "msg", "main")
    )
    for record in (timed, build, run):
        again = read_record(json.loads(record.dumps()))
        assert again == record
        assert type(again) is type(record)
    assert read_record(json.loads(run.dumps())).commit.parents == ("def",)


def test_read_record_refuses_unknown_kind_and_bad_trigger(timed):
    with pytest.raises(RecordError, match="unknown record kind"):
        read_record({"kind": "mystery", "schema_version": 1})
    data = json.loads(timed.dumps())
    del data["method"]
    with pytest.raises(RecordError, match="malformed measurement"):
        read_record(data)


def _reason_was_why(data: dict) -> dict:
    """A hypothetical v1 -> v2 step: version 1 called ``reason`` ``why``."""
    data["reason"] = data.pop("why")
    return data


def _as_v1(data: dict) -> dict:
    """``data`` (written at v2 by a record whose kind registered ``_reason_was_why``) as a
    version-1 producer wrote it."""
    old = {k: v for k, v in data.items() if k != "reason"}
    return {**old, "why": data["reason"], "schema_version": 1}


def test_an_older_record_is_upgraded_on_load(monkeypatch, make_correctness):
    monkeypatch.setattr(CorrectnessResult, "UPGRADES", (_reason_was_why,))
    record = make_correctness(verdict="fail", reason="rel error 3e-2 over 2e-3")
    written = record.to_json()
    assert (written["kind"], written["schema_version"]) == ("correctness", 2)
    assert CorrectnessResult.from_json(_as_v1(written)) == record
    assert read_record(_as_v1(written)) == record
    assert CorrectnessResult.from_json(written) == record  # the current version needs none


def test_upgrades_chain_in_order_from_any_older_version(monkeypatch, check):
    def tolerance_was_percent(data: dict) -> dict:  # v2 -> v3
        return {**data, "tolerance": data["tolerance"] / 100}

    monkeypatch.setattr(CorrectnessResult, "UPGRADES", (_reason_was_why, tolerance_was_percent))
    v2 = {**check.to_json(), "schema_version": 2, "tolerance": 100 * check.tolerance}
    v1 = _as_v1(v2)
    assert check.to_json()["schema_version"] == 3
    assert CorrectnessResult.from_json(v2) == check
    assert CorrectnessResult.from_json(v1) == check


def test_records_nested_in_a_record_are_upgraded_by_their_own_kind(monkeypatch, timed):
    pair = ABMeasurement(
        case=timed.case,
        status="ok",
        reason="",
        method=timed.method,
        device=timed.device,
        software=timed.software,
        base=timed,
        head=replace(timed, reason="2 samples throttled"),
    )
    monkeypatch.setattr(Measurement, "UPGRADES", (_reason_was_why,))
    data = pair.to_json()
    assert (data["schema_version"], data["base"]["schema_version"]) == (1, 2)
    old = {**data, "base": _as_v1(data["base"]), "head": _as_v1(data["head"])}
    assert read_record(old) == pair


def test_an_old_run_file_loads(tmp_path, monkeypatch, timed, check, make_run):
    run = make_run([timed, check])
    path = tmp_path / "run.jsonl"
    write_run_file(run, path)
    monkeypatch.setattr(Measurement, "UPGRADES", (_reason_was_why,))
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    lines[1] = _as_v1(lines[1])
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert read_run_file(path) == run


@pytest.mark.parametrize(
    ("version", "message"),
    [
        (2, "correctness record has schema_version=2; this kernelwatch reads version 1 and "
            "older: upgrade kernelwatch to read it"),
        (0, "correctness record has schema_version=0; expected a version from 1 to 1"),
        ("1", "correctness record has schema_version='1'; expected a version from 1 to 1"),
        (True, "correctness record has schema_version=True; expected a version from 1 to 1"),
        (None, "correctness record has schema_version=None; expected a version from 1 to 1"),
    ],
)  # fmt: skip
def test_a_version_this_code_cannot_read_is_refused_in_one_line(check, version, message):
    data = {**check.to_json(), "schema_version": version}
    with pytest.raises(RecordError) as refused:
        read_record(data)
    assert str(refused.value) == message


def test_every_record_kind_writes_its_header_and_reads_only_its_own(check, timed, make_build):
    for record in (check, timed, make_build()):
        data = record.to_json()
        assert (data["kind"], data["schema_version"]) == (type(record).KIND, 1)
        assert {"kind", "schema_version"}.isdisjoint(f.name for f in fields(record))
        with pytest.raises(RecordError, match="expected a 'run' record"):
            RunInfo.from_json(data)


def test_a_case_carries_its_family_outside_its_identity(check):
    declared = replace(check, case=replace(check.case, family="dense"))
    back = CorrectnessResult.from_json(json.loads(declared.dumps()))
    assert back.case.family == "dense" and back == declared
    assert declared.case.key() == check.case.key()


def test_a_record_without_a_family_takes_the_one_its_kernel_name_gives(check, timed, make_build):
    """A record written before families were declared reads back in the family the dashboards
    gave its kernel then."""
    for record, family in ((check, "gemm"), (timed, "norm"), (make_build(kernel="mla_decode"),
                                                             "attention")):  # fmt: skip
        data = record.to_json()
        case = data["case"] if "family" not in data else data
        del case["family"]
        assert read_record(data) == record and _family(read_record(data)) == family
    assert CaseId("teamx", "axpy", "smoke", {"n": 1}, "fp32").family == ""


def _family(record) -> str:
    return record.family if hasattr(record, "family") else record.case.family


def test_in_family_names_an_ab_records_sides_too(timed):
    pair = ABMeasurement(timed.case, "ok", "", timed.method, timed.device, timed.software,
                         base=timed, head=timed)  # fmt: skip
    named = in_family(pair, "pointwise")
    assert {named.case.family, named.base.case.family, named.head.case.family} == {"pointwise"}
    assert in_family(timed, "pointwise").case == replace(timed.case, family="pointwise")
