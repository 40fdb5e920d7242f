"""CUDA C++ kernels in a suite: declare the source once, launch it like any other kernel.

A spec's ``launch`` calls :meth:`CudaKernel.launch`. On a GPU the source is compiled with
``nvcc`` for the device's architecture (the same flags the build stage uses, so the cubin that
runs is the cubin that was analysed), loaded with the CUDA driver API through ``ctypes`` and
launched on torch's current stream. Finding the compiler, hashing the source, querying the
device and loading the module happen once per process, source, device and entry: a launch
only packs its arguments and calls ``cuLaunchKernel``, since the harness's host-timed
columns would otherwise carry tens of microseconds of bookkeeping. A GPU host without
``nvcc`` loads a cubin built elsewhere with the same flags, found by the source's hash and
the architecture in ``$KERNELWATCH_CUBIN_DIR`` (``prebuild_cubins``).

On the CPU there is nothing to run it on: the launch raises :class:`KernelUnsupported`, so its
cases are reported ``unsupported`` and the kernel is compile-only (``kernelwatch build``). The
build stage records launches instead of running them (``capture.py``), which needs no GPU
either.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.harness.isolation.sandbox import CUBIN_DIR_ENV
from kernelwatch.harness.spec import KernelUnsupported

CPU_REASON = "CUDA C++ kernel: compile-only without a GPU (see kernelwatch build)"

Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class CudaKernel:
    """A ``.cu`` file whose ``extern "C" __global__`` functions a spec launches by name.

    Kernel parameters are device pointers (passed as torch tensors) and integers, which are
    passed as 64-bit (declare them ``long long``).
    """

    source: Path

    def launch(
        self,
        entry: str,
        grid: Dim3,
        block: Dim3,
        args: Sequence[Any],
        shared_bytes: int = 0,
    ) -> None:
        """Run ``entry`` over ``grid`` x ``block`` on the device the tensor arguments live on."""
        devices = {a.device.type for a in args if hasattr(a, "data_ptr")}
        if devices != {"cuda"}:
            raise KernelUnsupported(CPU_REASON)
        _launch_on_gpu(self, entry, grid, block, args, shared_bytes)


def source_hash(source: Path) -> str:
    """SHA-256 of a CUDA source file's bytes (what the build cache keys CUDA kernels by)."""
    return hashlib.sha256(source.read_bytes()).hexdigest()


def _launch_on_gpu(
    kernel: CudaKernel, entry: str, grid: Dim3, block: Dim3, args: Sequence[Any], shared: int
) -> None:
    import torch

    device = next(a.device for a in args if hasattr(a, "data_ptr"))
    index = device.index if device.index is not None else torch.cuda.current_device()
    with torch.cuda.device(index):
        function = _function(str(kernel.source), index, entry)
        values = [
            ctypes.c_uint64(a.data_ptr()) if hasattr(a, "data_ptr") else ctypes.c_int64(int(a))
            for a in args
        ]
        params = (ctypes.c_void_p * len(values))(
            *(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values)
        )
        stream = ctypes.c_void_p(torch.cuda.current_stream(index).cuda_stream)
        _check(
            _cuda().cuLaunchKernel(
                function, *grid, *block, ctypes.c_uint(shared), stream, params, None
            ),
            f"cuLaunchKernel({entry})",
        )


def _arch(device_index: int) -> str:
    import torch

    major, minor = torch.cuda.get_device_capability(device_index)
    # Hopper and later need the arch-specific ("a") target for their own instructions.
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def cubin_name(source: Path, arch: str) -> str:
    """The file name of a prebuilt cubin: the source's SHA-256 and the architecture."""
    return f"{source_hash(source)}-{arch}.cubin"


def prebuild_cubins(sources: Sequence[Path], archs: Sequence[str], out_dir: Path) -> list[Path]:
    """Compile every source for every architecture into ``out_dir`` under
    :func:`cubin_name`, for GPU hosts without ``nvcc`` (``$KERNELWATCH_CUBIN_DIR``)."""
    from kernelwatch.harness.build.nvcc import compile_cuda

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for source in sources:
        for arch in archs:
            path = out_dir / cubin_name(source, arch)
            path.write_bytes(compile_cuda(source, arch).cubin)
            written.append(path)
    return written


def _cubin(source: Path, arch: str) -> bytes:
    """The cubin of ``source`` for ``arch``: compiled here with ``nvcc``, else prebuilt."""
    if shutil.which("nvcc") is not None:
        from kernelwatch.harness.build.nvcc import compile_cuda

        return compile_cuda(source, arch).cubin
    prebuilt = os.environ.get(CUBIN_DIR_ENV)
    if prebuilt and (path := Path(prebuilt) / cubin_name(source, arch)).is_file():
        return path.read_bytes()
    raise KernelUnsupported(
        f"CUDA C++ kernel: nvcc is not on PATH on this GPU host and ${CUBIN_DIR_ENV} has no "
        f"{arch} cubin of {source.name}; install the CUDA toolkit or prebuild the cubins "
        "(scripts/gpu-wheels.sh)"
    )


@functools.cache
def _function(source: str, device_index: int, entry: str) -> ctypes.c_void_p:
    """Build or find the cubin, load it and look up ``entry``: once per process, source,
    device and entry (the module stays loaded for the life of the process, as torch's own
    kernels do)."""
    cubin = _cubin(Path(source), _arch(device_index))
    cuda = _cuda()
    context = ctypes.c_void_p()
    _check(cuda.cuCtxGetCurrent(ctypes.byref(context)), "cuCtxGetCurrent")
    if not context.value:
        # torch made no context current on this thread yet: use the device's primary one.
        device = ctypes.c_int()
        _check(cuda.cuDeviceGet(ctypes.byref(device), device_index), "cuDeviceGet")
        _check(
            cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain"
        )
        _check(cuda.cuCtxSetCurrent(context), "cuCtxSetCurrent")
    module = ctypes.c_void_p()
    _check(cuda.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
    function = ctypes.c_void_p()
    _check(
        cuda.cuModuleGetFunction(ctypes.byref(function), module, entry.encode()),
        f"cuModuleGetFunction({entry})",
    )
    return function


@functools.cache
def _cuda() -> ctypes.CDLL:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise KernelUnsupported(f"CUDA C++ kernel: no CUDA driver ({exc})") from exc
    # Explicit types: ctypes would pass the grid as C ints and the handles as 32-bit ints.
    p, u = ctypes.c_void_p, ctypes.c_uint
    cuda.cuLaunchKernel.argtypes = [p, u, u, u, u, u, u, u, p, p, p]
    cuda.cuModuleLoadData.argtypes = [p, ctypes.c_char_p]
    cuda.cuModuleGetFunction.argtypes = [p, p, ctypes.c_char_p]
    cuda.cuCtxSetCurrent.argtypes = [p]
    return cuda


def _check(status: int, what: str) -> None:
    if status != 0:
        text = ctypes.c_char_p()
        _cuda().cuGetErrorString(status, ctypes.byref(text))
        name = text.value.decode() if text.value else f"CUresult {status}"
        raise RuntimeError(f"{what} failed: {name}")
