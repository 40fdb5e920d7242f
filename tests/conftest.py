"""Shared fixtures. The device is chosen before any test module imports Triton, so the
suite runs through Triton's CPU interpreter on machines without a GPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelwatch.harness.device import Device, select_device

DEVICE = select_device()


@pytest.fixture(scope="session")
def device() -> Device:
    return DEVICE


@pytest.fixture(scope="session")
def planted_suite_path() -> Path:
    """A suite of deliberately broken kernels (tests/planted/broken_suite.py)."""
    return Path(__file__).parent / "planted" / "broken_suite.py"


@pytest.fixture
def kernelwatch_cli():
    """Run the real ``kernelwatch`` console script in a subprocess."""

    def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        exe = Path(sys.executable).with_name("kernelwatch")
        return subprocess.run(
            [str(exe), *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, "COLUMNS": "200"},
            timeout=600,
        )

    return run
