"""How many build children a stage starts when its caller names no number: one per core (up
to 8), or ``$KERNELWATCH_BUILD_WORKERS`` on a host that runs other jobs beside the stage
(this suite's two test workers already keep both cores busy: docs/TESTING.md)."""

from __future__ import annotations

import os

import pytest

from kernelwatch.harness.build.stage import WORKERS_ENV, BuildRequest, default_workers


def test_one_child_per_core_up_to_8_unless_the_host_says(monkeypatch):
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    assert default_workers() == max(1, min(8, os.cpu_count() or 1))
    monkeypatch.setenv(WORKERS_ENV, "3")
    assert default_workers() == 3 and BuildRequest().workers == 3
    monkeypatch.setenv(WORKERS_ENV, " ")
    assert default_workers() == max(1, min(8, os.cpu_count() or 1))


def test_a_count_that_is_not_one_is_refused_in_one_line(monkeypatch, kernelwatch_cli):
    for value in ("0", "-1", "two", "1.5"):
        monkeypatch.setenv(WORKERS_ENV, value)
        with pytest.raises(ValueError, match=f"^{WORKERS_ENV} must be a whole number"):
            default_workers()
    monkeypatch.setenv(WORKERS_ENV, "two")
    proc = kernelwatch_cli("build", "--arch", "sm_90a", "-k", "rms_norm")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {WORKERS_ENV} must be a whole number of build children (at least 1), not 'two'"
    ]
    named = kernelwatch_cli("build", "--arch", "sm_90a", "-k", "nope", "--workers", "1")
    assert named.returncode == 2 and WORKERS_ENV not in named.stderr  # --workers wins
