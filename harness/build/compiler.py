"""Compile one recorded launch for one target and measure the result, through the cache.

Triton launches go through ``triton.compile`` with the recorded specialisation (no GPU
needed: ``GPUTarget`` names the target); CUDA C++ launches through ``nvcc``; CuTe DSL launches
through ``cute.compile`` on fake tensors (``cute_build.py``). Every cubin is read the same
way (``nvtools.analyse_cubin``). Runs in the build child only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import re
import time
from pathlib import Path
from typing import Any

from kernelwatch.harness.build import cute_build, nvcc, nvtools
from kernelwatch.harness.build.archs import ARCHS
from kernelwatch.harness.build.cache import Cache
from kernelwatch.harness.build.capture import CudaLaunch, CuteLaunch, TritonLaunch
from kernelwatch.harness.build.keys import launch_key
from kernelwatch.harness.build.plan import Job
from kernelwatch.harness.cuda_kernel import source_hash
from kernelwatch.harness.records import BuildMetrics


@dataclasses.dataclass(frozen=True)
class _Artifact:
    cubin: bytes
    ptxas_log: str
    function: str
    shared_dynamic_bytes: int
    num_warps: int | None
    num_stages: int | None
    seconds: float


def build(job: Job, suite: str, cache: Cache | None) -> BuildMetrics:
    """The build record of ``job``: from the cache when the same source, specialisation,
    target and toolchain were built before, else compiled now. Never raises for a kernel's
    own failure: that is an ``error`` record."""
    skeleton = job.skeleton(suite)
    try:
        key, source, toolchain = launch_key(job.launch, job.arch)
        hit = cache.get(key) if cache is not None else None
        if hit is not None:
            # The artifact is shared; the identity (kernel, case...) is this job's.
            return dataclasses.replace(
                skeleton,
                **{f: getattr(hit, f) for f in _MEASURED},
                source_hash=source,
                toolchain=toolchain,
                cached=True,
            )
        artifact = _compile(job)
        record = _measure(skeleton, artifact, source, toolchain)
    except Exception as exc:  # the kernel's failure, not the builder's
        message = f"{type(exc).__name__}: {exc}".strip()
        return dataclasses.replace(
            skeleton,
            reason=f"does not compile for {job.arch}: {cause(exc)[:300]}",
            detail=(message + "\n" + getattr(exc, "log", ""))[-4000:],
        )
    if cache is not None:
        cache.put(key, record)
    return record


def cause(exc: BaseException) -> str:
    """Why a compile failed, in one line. Triton's ``CompilationError`` starts with only
    where (``at 147:38:``), then the source, then the error it wraps (an error in a called
    ``@triton.jit`` function is wrapped once more): this is that innermost error, with where
    in the source of the function that raised it."""
    from triton.compiler.errors import CompilationError

    where = ""
    while isinstance(exc, CompilationError):
        if hasattr(exc.node, "lineno"):
            name = re.search(r"def\s+(\w+)", exc.src or "")
            function = name.group(1) if name else "the function"
            where = f" (line {exc.node.lineno}:{exc.node.col_offset} of {function})"
        inner = exc.__cause__
        if inner is None or (exc.error_message and isinstance(inner, CompilationError)):
            text = exc.error_message or "(no message)"
            return text.strip().splitlines()[0] + where
        exc = inner
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0] + where


_MEASURED = (
    "status",
    "registers",
    "spill_store_bytes",
    "spill_load_bytes",
    "stack_bytes",
    "shared_static_bytes",
    "shared_dynamic_bytes",
    "num_warps",
    "num_stages",
    "tensor_core",
    "tma_loads",
    "global_load_bits",
    "local_loads",
    "local_stores",
    "instructions",
    "opcodes",
    "cubin_bytes",
    "cubin_sha256",
    "sass_sha256",
    "compile_s",
)


def _compile(job: Job) -> _Artifact:
    if isinstance(job.launch, TritonLaunch):
        return _compile_triton(job.launch, job.arch)
    if isinstance(job.launch, CuteLaunch):
        return _compile_cute(job.launch, job.arch)
    return _compile_cuda(job.launch, job.arch)


def _compile_cute(launch: CuteLaunch, arch: str) -> _Artifact:
    built = cute_build.compile_cute(launch, arch)
    functions = nvtools.analyse_cubin(built.cubin, "")
    if len(functions) != 1:
        raise nvtools.ToolError(
            f"a CuTe DSL launch of {launch.function} compiled to {len(functions)} kernels "
            f"({sorted(functions)}); kernelwatch builds one kernel a launch"
        )
    return _Artifact(
        cubin=built.cubin,
        ptxas_log=built.ptxas_log,
        function=next(iter(functions)),  # the DSL names it after the @cute.kernel
        shared_dynamic_bytes=0,  # set at launch time by the host function, not known here
        num_warps=-(-built.threads // 32) if built.threads else None,
        num_stages=None,
        seconds=built.seconds,
    )


def _compile_triton(launch: TritonLaunch, arch: str) -> _Artifact:
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    # ptxas's -v report is the only place spills are stated; Triton prints it when asked.
    knobs.nvidia.dump_ptxas_log = True
    log = io.StringIO()
    source = ASTSource(launch.fn, launch.signature, launch.constexprs, launch.attrs)
    target = GPUTarget("cuda", ARCHS[arch].capability, 32)
    start = time.perf_counter()
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(source, target=target, options=dict(launch.options))
    seconds = time.perf_counter() - start
    meta = compiled.metadata
    return _Artifact(
        cubin=compiled.asm["cubin"],
        ptxas_log=log.getvalue(),
        function=meta.name,
        shared_dynamic_bytes=int(meta.shared),
        num_warps=int(meta.num_warps),
        num_stages=int(meta.num_stages),
        seconds=seconds,
    )


def _compile_cuda(launch: CudaLaunch, arch: str) -> _Artifact:
    built = _nvcc(str(launch.kernel.source), source_hash(launch.kernel.source), arch)
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    return _Artifact(
        cubin=built.cubin,
        ptxas_log=built.log,
        function=launch.entry,
        shared_dynamic_bytes=launch.shared_bytes,
        num_warps=-(-threads // 32),
        num_stages=None,  # no software pipelining to speak of in CUDA C++
        seconds=built.seconds,
    )


@functools.cache
def _nvcc(source: str, digest: str, arch: str) -> nvcc.CudaBuild:
    """One nvcc run per file and target serves every entry point in it."""
    return nvcc.compile_cuda(Path(source), arch)


def _measure(
    skeleton: BuildMetrics, artifact: _Artifact, source: str, toolchain: dict[str, Any]
) -> BuildMetrics:
    functions = nvtools.analyse_cubin(artifact.cubin, artifact.ptxas_log)
    if artifact.function not in functions:
        raise nvtools.ToolError(
            f"function {artifact.function!r} is not in the cubin (found {sorted(functions)}); "
            'declare CUDA entry points extern "C" __global__'
        )
    f = functions[artifact.function]
    return dataclasses.replace(
        skeleton,
        status="ok",
        registers=f.registers,
        spill_store_bytes=f.spill_store_bytes,
        spill_load_bytes=f.spill_load_bytes,
        stack_bytes=f.stack_bytes,
        shared_static_bytes=f.shared_static_bytes,
        shared_dynamic_bytes=artifact.shared_dynamic_bytes,
        num_warps=artifact.num_warps,
        num_stages=artifact.num_stages,
        tensor_core=f.mix.tensor_core,
        tma_loads=f.mix.tma_loads,
        global_load_bits=f.mix.global_load_bits,
        local_loads=f.mix.local_loads,
        local_stores=f.mix.local_stores,
        instructions=f.mix.instructions,
        opcodes=f.mix.opcodes,
        cubin_bytes=len(artifact.cubin),
        cubin_sha256=hashlib.sha256(artifact.cubin).hexdigest(),
        sass_sha256=f.code_sha256,
        source_hash=source,
        compile_s=round(artifact.seconds, 4),
        toolchain=toolchain,
    )
