"""``kernelwatch bench`` and ``selfcheck`` end to end: real child processes, real Triton
kernels through the interpreter, planted crashes and hangs."""

from __future__ import annotations

import json
import re

from kernelwatch.harness.records import Measurement
from kernelwatch.harness.timing.pinning import load_pins, pinned_config
from kernelwatch.harness.timing.timers import HARNESS_VERSION

_FAST = ("--budget", "0.05")


def _records(stdout: str) -> list[Measurement]:
    return [Measurement.from_json(json.loads(line)) for line in stdout.splitlines()]


def test_every_case_is_a_record_with_samples_statistic_and_provenance(
    kernelwatch_cli, device, tmp_path
):
    pins = tmp_path / "pins.json"
    proc = kernelwatch_cli(
        *("bench", "-k", "softmax", "-k", "gemm", "--dtype", "fp32", "--dtype", "bf16"),
        *("--json", "--save-pins", str(pins), *_FAST),
    )
    assert proc.returncode == 0, proc.stderr
    records = _records(proc.stdout)
    assert len(records) == (4 + 5) * 2  # cases x dtypes, unsupported ones included
    for r in records:
        if r.case.dtype == "bf16" and device.info.kind == "cpu":
            assert r.status == "unsupported" and "interpreter" in r.reason
            continue
        assert r.status == "ok", (r.case, r.reason)
        assert r.summary.n >= 10 and len(r.samples_ns) >= 10
        assert r.summary.ci_low_ns <= r.summary.median_ns <= r.summary.ci_high_ns
        assert r.summary.stop in ("converged", "budget")
        assert r.method.label() == f"cpu-perf-counter/warm/h{HARNESS_VERSION}"
        assert r.device.host and r.software.torch and r.software.triton and r.software.python
        assert r.sol.tflops > 0 and r.sol.gbps > 0 and r.sol.pct_sol is None
        assert r.speedup > 0 and len(r.baseline_samples_ns) == len(r.samples_ns)
        assert r.config is not None and r.telemetry.available is False
    gemm = next(r for r in records if r.case.kernel == "gemm" and r.status == "ok")
    assert gemm.config_source == "pinned"
    assert "bench: 9 measured, 0 error, 9 unsupported (18 cases)" in proc.stderr

    saved = load_pins(pins)
    assert pinned_config(saved, "gemm", gemm.case.params, gemm.case.dtype) == gemm.config
    # Where each config came from is the question: no baseline needs timing beside it.
    again = kernelwatch_cli(
        "bench", "-k", "gemm", "--dtype", "fp32", "--json", "--pin", str(pins), "--no-baseline",
        *_FAST,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert {r.config_source for r in _records(again.stdout)} == {"pin-file"}


def test_table_and_measured_ceilings(kernelwatch_cli):
    proc = kernelwatch_cli(
        "bench", "-k", "softmax", "--dtype", "fp32", "--measure-ceilings", *_FAST
    )
    assert proc.returncode == 0, proc.stderr
    assert "measured ceilings: copy" in proc.stderr
    for column in ("median", "95% CI", "samples", "TFLOP/s", "GB/s", "%SOL"):
        assert column in proc.stdout
    # Triton's interpreter against torch's CPU kernels says nothing of a GPU (issue 33).
    assert "speedup (interpreter)" in proc.stdout


def test_crashes_and_hangs_become_error_records_and_the_rest_still_run(
    kernelwatch_cli, planted_suite_path
):
    proc = kernelwatch_cli(
        "bench",
        "--suite",
        str(planted_suite_path),
        *("-k", "good", "-k", "raises", "-k", "segfault", "-k", "hangs"),
        *("--dtype", "fp32", "--json", "--timeout", "4"),
        *_FAST,
    )
    assert proc.returncode == 1
    records = {r.case.kernel: r for r in _records(proc.stdout)}
    assert {k: r.status for k, r in records.items()} == {
        "good": "ok",
        "raises": "error",
        "segfault": "error",
        "hangs": "error",
    }
    assert "planted: the kernel raised" in records["raises"].reason
    assert "died of signal SIGSEGV" in records["segfault"].reason
    assert "timed out after 4 s" in records["hangs"].reason
    assert records["segfault"].method == records["good"].method


def test_bad_input_exits_2_on_one_line(kernelwatch_cli, tmp_path):
    graph = kernelwatch_cli("bench", "-k", "softmax", "--timer", "cuda-graph")
    assert graph.returncode == 2
    assert graph.stderr.strip().startswith("error: timer 'cuda-graph' needs a CUDA GPU")
    pins = kernelwatch_cli("bench", "--pin", str(tmp_path / "none.json"))
    assert pins.returncode == 2 and "cannot read pin file" in pins.stderr
    assert pins.stderr.strip().count("\n") == 0


def test_selfcheck_runs_every_stage_in_child_processes_and_reports_each(kernelwatch_cli, tmp_path):
    """On the CPU: the real stages in real children through the interpreter (the simulated
    GPU rehearsal is tests/test_selfcheck.py). What needs CUDA is reported as not settled."""
    proc = kernelwatch_cli(
        "selfcheck",
        *("--workload", "smoke", "--dtype", "fp16", "-k", "softmax"),
        *("--out", str(tmp_path), *_FAST),
    )
    assert proc.returncode == 1, proc.stderr  # do_bench and NVML need a GPU: not settled
    # Each finding's status is coloured, not printed as markup (issue 17: markup off).
    assert re.search(r"^(PASS|FAIL|INCOMPLETE|SKIPPED) ", proc.stderr, re.MULTILINE)
    assert not re.search(r"\[/?(bold red|green|yellow|dim)\]", proc.stderr)
    (folder,) = tmp_path.iterdir()
    assert {p.name for p in folder.iterdir()} == {"selfcheck.json", "summary.md"}
    report = json.loads((folder / "selfcheck.json").read_text())
    assert list(report["stages"]) == ["sandbox", "measurements", "correctness", "aa", "ncu"]
    assert report["stages"]["sandbox"].startswith("sandboxed: children run")
    findings = {f["key"]: f for f in report["findings"]}
    (row,) = report["data"]["agreement"]["rows"]
    assert row["ours"]["median_ns"] > 0 and row["do_bench_ns"] is None  # do_bench needs CUDA
    assert findings["correctness"]["line"].startswith("4/4 (100.0%) fp16 cases pass")
    assert findings["correctness"]["status"] == "fail"  # no CUDA C++ kernel selected
    assert findings["ncu"]["status"] == "skipped"
    # The traced step ran under the real torch.profiler in the child: the interpreter
    # launches no GPU kernel, which the reader says, and the run went on (issue 44).
    trace = report["data"]["trace"]
    assert trace["steps"] == 3 and trace["kernel_events"] is False and "trace_gz" not in trace
    ((kernel, functions),) = [(k["kernel"], k["functions"]) for k in trace["kernels"]]
    assert kernel == "softmax" and functions == ["softmax_kernel"]
    assert findings["trace"]["status"] == "incomplete"
    assert "with no GPU kernel events (a CPU-only profile)" in findings["trace"]["line"]
    aa = report["data"]["aa"]
    # Two of softmax's four smoke cases, in two pairs of independent processes.
    assert aa["planned"] == len(aa["cases"]) == 4 and aa["processes"] == 4
    assert {c["status"] for c in aa["cases"]} == {"ok"}
    summary = (folder / "summary.md").read_text()
    assert summary.startswith("# kernelwatch GPU self-check:")
    assert "## Kernel times (us)" in summary and "## Ceilings" in summary
    bad = kernelwatch_cli("selfcheck", "-k", "nope", "--out", str(tmp_path))
    assert bad.returncode == 2 and "unknown kernel 'nope'" in bad.stderr
