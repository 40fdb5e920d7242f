"""``kernelwatch check`` end to end: real child processes, real Triton kernels, planted faults."""

from __future__ import annotations

import json

from kernelwatch.harness.records import CorrectnessResult
from kernelwatch.kernels import SUITE


def _records(stdout: str) -> dict[tuple[str, str], CorrectnessResult]:
    records = [CorrectnessResult.from_json(json.loads(line)) for line in stdout.splitlines()]
    return {(r.case.kernel, r.case.dtype): r for r in records}


def test_every_planted_fault_is_caught_and_the_rest_still_report(
    kernelwatch_cli, planted_suite_path
):
    proc = kernelwatch_cli("check", "--suite", str(planted_suite_path), "--json", "--timeout", "6")
    assert proc.returncode == 1, proc.stderr
    records = _records(proc.stdout)
    verdicts = {kernel: r.verdict for (kernel, dtype), r in records.items() if dtype == "fp32"}
    assert verdicts == {
        "good": "pass",
        "wrong_result": "fail",
        "unwritten_tail": "fail",
        "nan_output": "fail",
        "nondeterministic": "fail",
        "raises": "error",
        "segfault": "error",
        "hangs": "error",
    }
    # both dtypes of every kernel reported, in suite order, despite a crash and a hang
    assert len(records) == 16
    assert records[("good", "fp16")].verdict == "pass"
    assert "died of signal SIGSEGV" in records[("segfault", "fp32")].reason
    assert "timed out after 6 s" in records[("hangs", "fp32")].reason
    assert "check: 2 pass, 8 fail, 6 error, 0 unsupported (16 cases)" in proc.stderr


def test_crash_record_keeps_provenance(kernelwatch_cli, planted_suite_path):
    proc = kernelwatch_cli(
        "check", "--suite", str(planted_suite_path), "-k", "segfault", "--dtype", "fp16", "--json"
    )
    assert proc.returncode == 1
    (record,) = _records(proc.stdout).values()
    assert record.case.suite == "planted" and record.case.params == {"n": 70}
    assert record.case.family == "planted"  # the spec's, though the parent wrote the record
    assert record.software.torch and record.device.host
    assert "Fatal Python error" in record.detail or "Segmentation fault" in record.detail


def test_unknown_kernel_exits_2_naming_the_valid_ones(kernelwatch_cli):
    proc = kernelwatch_cli("check", "--kernel", "nope")
    assert proc.returncode == 2
    message = proc.stderr.strip()
    assert message.count("\n") == 0
    assert message.startswith("error: unknown kernel 'nope'; valid kernels: rms_norm,")
    for name in ("gemm", "flash_attention", "softmax", "silu_and_mul", "rope"):
        assert name in message


def test_unknown_workload_and_dtype_exit_2(kernelwatch_cli):
    workload = kernelwatch_cli("check", "--workload", "huge")
    assert workload.returncode == 2
    assert "unknown workload 'huge'; valid workloads: asr, decode, llm, moe, smoke" in (
        workload.stderr
    )
    dtype = kernelwatch_cli("check", "--dtype", "fp4")
    assert dtype.returncode == 2
    assert "valid dtypes: fp32, fp16, bf16, fp8" in dtype.stderr


def test_unimportable_suite_exits_2(kernelwatch_cli, tmp_path):
    broken = tmp_path / "suite.py"
    broken.write_text("import does_not_exist\n")
    proc = kernelwatch_cli("check", "--suite", str(broken))
    assert proc.returncode == 2
    assert "ModuleNotFoundError: No module named 'does_not_exist'" in proc.stderr


def test_module_without_suite_exits_2(kernelwatch_cli, tmp_path):
    empty = tmp_path / "suite.py"
    empty.write_text("KERNELS = []\n")
    proc = kernelwatch_cli("check", "--suite", str(empty))
    assert proc.returncode == 2
    assert "has no SUITE" in proc.stderr and "docs/SUITES.md" in proc.stderr


#: A kernel of each language the built-in suite is written in: Triton, CUDA C++, CuTe DSL.
EACH_LANGUAGE = ("softmax", "silu_and_mul_cuda", "silu_and_mul_cute")


def test_builtin_smoke_passes_with_bf16_listed_as_unsupported(kernelwatch_cli, device):
    """The built-in suite through the command: every kernel's bf16 cases (on the CPU each says
    it is unsupported, and why, without running), then every dtype of a kernel of each
    language. Every kernel's fp32/fp16 smoke cases passing is held in-process by
    tests/test_builtin_suite.py::test_smoke_passes (docs/TESTING.md, "Tests merged or
    narrowed")."""
    every = kernelwatch_cli("check", "--workload", "smoke", "--dtype", "bf16", "--json")
    some = kernelwatch_cli(
        "check", "--workload", "smoke", "--json", *(f"-k{name}" for name in EACH_LANGUAGE)
    )
    records = []
    for proc in (every, some):
        assert proc.returncode == 0, proc.stderr
        records += [
            CorrectnessResult.from_json(json.loads(line)) for line in proc.stdout.splitlines()
        ]
    for r in records:
        if r.case.dtype == "bf16" and device.info.kind == "cpu":
            assert r.verdict == "unsupported" and "interpreter" in r.reason
        elif r.case.kernel in ("silu_and_mul_cuda", "silu_and_mul_cute") and (
            device.info.kind == "cpu"
        ):
            assert r.verdict == "unsupported" and "compile-only without a GPU" in r.reason
        else:
            assert r.verdict == "pass", (r.case, r.reason)
    bf16 = {(s.name, "bf16") for s in SUITE.kernels if "bf16" in s.dtypes}
    assert len(bf16) >= 7
    mine = {(name, d) for name in EACH_LANGUAGE for d in SUITE.kernel(name).dtypes}
    assert {(r.case.kernel, r.case.dtype) for r in records} == bf16 | mine


def test_table_lists_unsupported_reason_once(kernelwatch_cli):
    proc = kernelwatch_cli("check", "--kernel", "softmax")
    assert proc.returncode == 0, proc.stderr
    assert "unsupported" in proc.stdout
    assert proc.stdout.count("Triton's CPU interpreter computes bf16") == 1
    assert "check: 8 pass, 0 fail, 0 error, 4 unsupported (12 cases)" in proc.stderr
    assert "[green]" not in proc.stdout and "[/" not in proc.stdout  # styled, not raw markup


def test_suite_that_crashes_at_import_exits_2(kernelwatch_cli, tmp_path):
    crashing = tmp_path / "suite.py"
    crashing.write_text("import ctypes\nctypes.string_at(0)\n")
    proc = kernelwatch_cli("check", "--suite", str(crashing))
    assert proc.returncode == 2
    assert "the runner died of signal SIGSEGV before running a case" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
