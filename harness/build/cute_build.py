"""Compile a recorded CuTe DSL launch offline for one target, in a process of its own.

The DSL reads its target (``CUTE_DSL_ARCH``) and what it keeps of a compile and where
(``CUTE_DSL_KEEP_CUBIN``, ``CUTE_DSL_KEEP_PTX``, ``CUTE_DSL_DUMP_DIR``) when it is imported,
so each target is compiled by a fresh ``python -m kernelwatch.harness.build.cute_build``: it
imports the function's file, makes fake tensors of the recorded dtypes, shapes and strides
(``cutlass.cute.runtime.make_fake_tensor``: no GPU, no memory) and calls ``cute.compile``.
The parent reads the cubin it left, and runs the PTX through ``ptxas -v`` for the spills,
which the DSL does not report. Runs in the build child only (kernel code).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelwatch.harness.build import nvtools
from kernelwatch.harness.isolation.quick_exit import quick_exit

if TYPE_CHECKING:  # the compiling process imports no torch (1.6 s a compile): only the DSL
    from kernelwatch.harness.build.capture import CuteLaunch

#: torch's dtype names and the CuTe DSL numeric types the build's fake tensors are made of.
CUTE_DTYPES = {
    "torch.float32": "Float32",
    "torch.float16": "Float16",
    "torch.bfloat16": "BFloat16",
    "torch.float8_e4m3fn": "Float8E4M3FN",
    "torch.int32": "Int32",
    "torch.int64": "Int64",
    "torch.uint8": "Uint8",
}
#: The most one target's compile may take.
TIMEOUT_S = 300
_THREADS = re.compile(r"\.(?:reqntid|maxntid)\s+(\d+)(?:,\s*(\d+))?(?:,\s*(\d+))?")


class CuteBuildError(RuntimeError):
    """A CuTe DSL compile failed; ``log`` holds what it printed."""

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass(frozen=True)
class CuteBuild:
    """One target's compile: the cubin, ptxas's ``-v`` report of it, the kernel's threads
    per block where the PTX states them, and how long the DSL took."""

    cubin: bytes
    ptxas_log: str
    threads: int | None
    seconds: float


def dsl_version() -> str:
    """The installed ``nvidia-cutlass-dsl``'s version ("absent" without it)."""
    try:
        return metadata.version("nvidia-cutlass-dsl")
    except metadata.PackageNotFoundError:
        return "absent"


def compile_cute(launch: CuteLaunch, arch: str) -> CuteBuild:
    """Compile ``launch`` for ``arch`` (``sm_90a``, ``sm_100a``) in a fresh process."""
    if dsl_version() == "absent":
        raise CuteBuildError(
            "nvidia-cutlass-dsl is not installed: pip install 'kernelwatch[cute]' to build "
            "CuTe DSL kernels"
        )
    request = {
        "source": str(launch.kernel.source),
        "function": launch.kernel.function,
        "arguments": launch.arguments,
    }
    with tempfile.TemporaryDirectory(prefix="kw-cute-") as dump:
        env = {**os.environ, "CUTE_DSL_ARCH": arch, "CUTE_DSL_KEEP_CUBIN": "1",
               "CUTE_DSL_KEEP_PTX": "1", "CUTE_DSL_DUMP_DIR": dump}  # fmt: skip
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", __name__],
            input=json.dumps(request), capture_output=True, text=True, env=env,
            timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
        seconds = time.perf_counter() - start
        log = (done.stdout + done.stderr)[-4000:]
        cubins, ptxs = sorted(Path(dump).glob("*.cubin")), sorted(Path(dump).glob("*.ptx"))
        if done.returncode != 0 or len(cubins) != 1:
            last = log.strip().splitlines()[-1] if log.strip() else f"exit {done.returncode}"
            found = f"; it left {len(cubins)} cubins" if done.returncode == 0 else ""
            raise CuteBuildError(f"cute.compile failed: {last}{found}", log)
        ptx = ptxs[0].read_text() if ptxs else ""
        return CuteBuild(cubins[0].read_bytes(), _ptxas_log(ptx, arch), _threads(ptx), seconds)


def _ptxas_log(ptx: str, arch: str) -> str:
    """``ptxas -v``'s report of ``ptx`` (its spills), or "" without PTX."""
    if not ptx:
        return ""
    with tempfile.TemporaryDirectory(prefix="kw-ptxas-") as work:
        source = Path(work) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run(
            [nvtools.tool("ptxas-blackwell"), "-v", f"--gpu-name={arch}", str(source),
             "-o", str(Path(work) / "kernel.cubin")],
            capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    return done.stdout + done.stderr


def _threads(ptx: str) -> int | None:
    match = _THREADS.search(ptx)
    if match is None:
        return None
    product = 1
    for dim in match.groups():
        product *= int(dim or 1)
    return product


# The worker's side: runs as ``python -m kernelwatch.harness.build.cute_build``.


def _fake(argument: Any) -> Any:
    """A recorded argument as ``cute.compile`` takes it: a fake tensor, or the value. A
    dynamic layout's sizes and strides (None) are symbols of the widths ``from_dlpack``'s
    dynamic layouts have on a GPU: 32-bit sizes, 64-bit strides."""
    import cutlass
    import cutlass.cute as cute
    from cutlass.cute.runtime import make_fake_tensor

    if isinstance(argument, list) and argument and argument[0] == "tensor":
        _, dtype, shape, stride = argument
        if dtype not in CUTE_DTYPES:
            raise ValueError(f"a {dtype} tensor has no CuTe DSL type here ({sorted(CUTE_DTYPES)})")
        sizes = tuple(cute.sym_int() if n is None else n for n in shape)
        steps = tuple(cute.sym_int64() if n is None else n for n in stride)
        return make_fake_tensor(getattr(cutlass, CUTE_DTYPES[dtype]), sizes, steps)
    return argument


def main() -> int:
    """Compile the request on stdin; the DSL writes the cubin and PTX to its dump folder."""
    request = json.loads(sys.stdin.read())
    source = Path(request["source"])
    sys.path.insert(0, str(source.parent))
    spec = importlib.util.spec_from_file_location(f"kw_cute_{source.stem}", source)
    if spec is None or spec.loader is None:
        sys.exit(f"cannot import {source}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fn: Any = module
    for part in request["function"].split("."):
        fn = getattr(fn, part)
    import cutlass.cute as cute

    cute.compile(fn, *(_fake(a) for a in request["arguments"]))
    return 0


if __name__ == "__main__":
    quick_exit(main())
