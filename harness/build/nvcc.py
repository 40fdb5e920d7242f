"""Compile CUDA C++ with ``nvcc`` to a cubin for one target, keeping ptxas's report.

The build stage analyses the cubin exactly as it does Triton's (``nvtools.analyse_cubin``);
on a GPU the same cubin is what ``cuda_kernel.py`` loads and runs.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Flags every CUDA C++ kernel is built with; part of the build cache key.
NVCC_FLAGS: tuple[str, ...] = ("-O3", "-std=c++17", "--resource-usage")


class NvccError(RuntimeError):
    """nvcc is missing or rejected the source; the message is one line, ``log`` the rest."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class CudaBuild:
    cubin: bytes
    log: str
    seconds: float


def nvcc_path() -> str:
    """The ``nvcc`` on PATH; raises :class:`NvccError` saying how to get one."""
    path = shutil.which("nvcc")
    if path is None:
        raise NvccError("nvcc is not on PATH: install the CUDA toolkit (12.8 or later)")
    return path


@functools.cache
def nvcc_version() -> str:
    """``13.0.88`` from ``nvcc --version``."""
    from kernelwatch.harness.build.nvtools import tool_version

    return tool_version(nvcc_path())


def gencode(arch: str) -> str:
    """``sm_90a`` -> ``-gencode=arch=compute_90a,code=sm_90a`` (the form wgmma needs)."""
    return f"-gencode=arch=compute_{arch.removeprefix('sm_')},code={arch}"


def compile_cuda(source: Path, arch: str) -> CudaBuild:
    """Compile ``source`` for ``arch``; ``log`` holds ptxas's per-function resource report."""
    with tempfile.TemporaryDirectory(prefix="kernelwatch-nvcc-") as tmp:
        out = Path(tmp) / "kernel.cubin"
        cmd = [nvcc_path(), "-cubin", gencode(arch), *NVCC_FLAGS, "-o", str(out), str(source)]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=source.parent)
        seconds = time.perf_counter() - start
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:200])
            raise NvccError(f"nvcc failed for {arch}: {first.strip()}", log)
        return CudaBuild(out.read_bytes(), log, seconds)
