"""The self-check's ncu stage through the real sandbox, with a stand-in ``ncu`` on PATH that
does what the profiler does to the command it wraps: writes its CSV to ``--log-file`` and runs
the rest of its arguments. The H200 self-check of 2026-12-04 (docs/gpu/h200-2026-12-04/)
reported only ``the self-check runner exited with code 1: (empty)``: ncu runs inside the
child's jail, as the sandbox user, where the parent's temporary directory (its log's folder)
is hidden, and whatever ncu said went to that log, which nobody read."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelwatch.harness.isolation.supervise import SuiteError
from kernelwatch.harness.selfcheck.stages import ChildBackend, SelfcheckPlan
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions

#: The fake profiler: ncu's options up to ``--launch-count N``, then the wrapped command.
NCU = """#!/bin/sh
log=""
while [ $# -gt 0 ]; do
  case "$1" in
    --log-file) log="$2"; shift 2 ;;
    --launch-count) shift 2; break ;;
    *) shift ;;
  esac
done
{ echo '==PROF== Connected to process'
  echo '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"'
  echo '"0","silu_and_mul_kernel","gpu__time_duration.sum","usecond","12.50"'
} > "$log" || exit 1
%s
exec "$@"
"""


def _fake_ncu(folder: Path, before_exec: str = "") -> None:
    folder.mkdir()
    ncu = folder / "ncu"
    ncu.write_text(NCU % before_exec)
    ncu.chmod(0o755)
    folder.chmod(0o755)


def _plan() -> SelfcheckPlan:
    """The %SOL case at an interpreter's size (the real one is 16,384 x 28,672)."""
    bench = BenchOptions(budget_s=0.05, warmup_s=0.01, cool_down_s=0.0, baseline=False)
    options = SelfcheckOptions(bench=bench, sol_case={"tokens": 2, "intermediate": 64})
    return SelfcheckPlan(options=options, deadline_s=120.0)


def test_ncu_writes_its_log_where_the_sandbox_user_can_and_its_durations_come_back(
    tmp_path, monkeypatch
):
    _fake_ncu(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with ChildBackend(trusted=True) as backend:
        assert backend.has_ncu()
        data = backend.ncu(_plan(), time.monotonic() + 110)
    assert data["ncu_ns"] == pytest.approx([12_500.0])
    assert (data["kernel"], data["case"]) == ("silu_and_mul", "tokens=2 intermediate=64")
    assert data["note"] == ""


def test_what_ncu_said_before_its_run_failed_is_in_the_error(tmp_path, monkeypatch):
    _fake_ncu(
        tmp_path / "bin", "echo '==ERROR== ERR_NVGPUCTRPERM - no permission' >> \"$log\"; exit 1"
    )
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    with ChildBackend(trusted=True) as backend, pytest.raises(SuiteError) as raised:
        backend.ncu(_plan(), time.monotonic() + 110)
    assert "ERR_NVGPUCTRPERM" in str(raised.value)
