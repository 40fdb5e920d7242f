"""NVIDIA's binary tools as Triton's wheel bundles them: where they are, their versions, and
the analysis of a cubin (``cuobjdump``), which works on this CPU-only machine.

The parsing lives in ``sass.py``; this module only runs the tools. It imports Triton's
backend module for the tool paths, so it belongs in the build child, not in the CLI process.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from kernelwatch.harness.build import sass


class ToolError(RuntimeError):
    """A bundled tool is missing or failed on an input."""


@dataclass(frozen=True)
class FunctionMetrics:
    """Everything read from a cubin (and the ptxas log that produced it) for one function."""

    registers: int
    stack_bytes: int
    shared_static_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    mix: sass.InstructionMix
    code_sha256: str | None = None


@functools.cache
def tool(name: str) -> str:
    """Path of a tool from Triton's wheel (``ptxas``, ``ptxas-blackwell``, ``cuobjdump``)."""
    from triton.backends.nvidia import compiler

    path = Path(compiler.__file__).parent / "bin" / name
    if not path.is_file():
        raise ToolError(f"{path} is missing: reinstall triton (its wheel bundles {name})")
    return str(path)


@functools.cache
def tool_version(path: str) -> str:
    """``13.4.59`` from a CUDA tool's ``--version`` banner (``V13.4.59``)."""
    banner = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    found = re.search(r"\bV(\d+\.\d+\.\d+)", banner)
    return found.group(1) if found else "unknown"


@functools.cache
def triton_toolchain(capability: int) -> dict[str, str]:
    """Versions that decide what Triton produces for ``capability``: Triton, its ptxas, and
    the cuobjdump that reads the result."""
    from triton.backends.nvidia.compiler import get_ptxas

    return {
        "triton": metadata.version("triton"),
        "ptxas": tool_version(get_ptxas(capability).path),
        "cuobjdump": tool_version(tool("cuobjdump")),
    }


def analyse_cubin(cubin: bytes, ptxas_log: str) -> dict[str, FunctionMetrics]:
    """Per-function metrics of ``cubin``; spills come from the log of the ptxas run that
    produced it (a cubin does not record them)."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = sass.parse_resource_usage(_cuobjdump("--dump-resource-usage", f.name))
        listing = _cuobjdump("-sass", f.name)
    opcodes = sass.parse_sass(listing)
    code = sass.code_hashes(listing)
    spills = sass.parse_ptxas_log(ptxas_log)
    metrics = {}
    for name, res in usage.items():
        spill = spills.get(name, sass.Spills(res.stack_bytes, 0, 0))
        metrics[name] = FunctionMetrics(
            registers=res.registers,
            stack_bytes=res.stack_bytes,
            shared_static_bytes=res.shared_static_bytes,
            spill_store_bytes=spill.store_bytes,
            spill_load_bytes=spill.load_bytes,
            mix=sass.instruction_mix(opcodes.get(name, {})),
            code_sha256=code.get(name),
        )
    return metrics


def _cuobjdump(flag: str, path: str) -> str:
    proc = subprocess.run([tool("cuobjdump"), flag, path], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolError(f"cuobjdump {flag} failed: {proc.stderr.strip()[:300]}")
    return proc.stdout
