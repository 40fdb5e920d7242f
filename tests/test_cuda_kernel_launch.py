"""The CUDA C++ launch path with a fake driver and a fake device: per-launch work stays a
packing of arguments and one ``cuLaunchKernel``."""

from __future__ import annotations

import contextlib
import shutil
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernelwatch.harness import cuda_kernel
from kernelwatch.harness.build import nvcc
from kernelwatch.harness.cuda_kernel import CUBIN_DIR_ENV, CudaKernel, cubin_name
from kernelwatch.harness.spec import KernelUnsupported

SOURCE = Path(cuda_kernel.__file__).parents[1] / "kernels" / "cuda" / "silu_and_mul.cu"


class FakeTensor:
    device = torch.device("cuda", 0)

    def data_ptr(self) -> int:
        return 0x7F0000000000


@pytest.fixture
def gpu(monkeypatch):
    """Count everything a launch asks of the host: PATH lookups, source reads, compiles,
    device queries, and driver calls."""
    calls: Counter[str] = Counter()

    def counted(name, value=None):
        def call(*args, **kwargs):
            calls[name] += 1
            return value(*args, **kwargs) if callable(value) else value

        return call

    driver = SimpleNamespace(
        # a context is current (torch made it); byref's _obj is the c_void_p passed in
        cuCtxGetCurrent=counted("cuCtxGetCurrent", lambda ref: setattr(ref._obj, "value", 1) or 0),
        cuModuleLoadData=counted("cuModuleLoadData", 0),
        cuModuleGetFunction=counted("cuModuleGetFunction", 0),
        cuLaunchKernel=counted("cuLaunchKernel", 0),
    )
    monkeypatch.setattr(cuda_kernel, "_cuda", lambda: driver)
    monkeypatch.setattr(shutil, "which", counted("which", "/usr/local/bin/nvcc"))
    monkeypatch.setattr(nvcc, "compile_cuda", counted("nvcc", nvcc.CudaBuild(b"cubin", "", 0.1)))
    real_read = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda p: calls.update(["read"]) or real_read(p))
    for name, value in (
        ("get_device_capability", (9, 0)),
        ("current_device", 0),
        ("current_stream", SimpleNamespace(cuda_stream=0)),
        ("device", contextlib.nullcontext()),
    ):
        monkeypatch.setattr(torch.cuda, name, counted(name, value))
    cuda_kernel._function.cache_clear()
    yield calls
    cuda_kernel._function.cache_clear()


def test_a_launch_does_the_lookups_once_per_process(gpu):
    kernel = CudaKernel(SOURCE)
    for _ in range(100):
        kernel.launch("silu_and_mul_bf16", (1, 1, 1), (256, 1, 1), [FakeTensor(), FakeTensor(), 8])
    assert gpu["cuLaunchKernel"] == 100
    # what used to happen on every launch happens once
    for once in ("which", "nvcc", "get_device_capability", "cuModuleLoadData"):
        assert gpu[once] == 1, once
    assert gpu["read"] == 0  # the compiler reads the source, not the launch


def test_without_nvcc_a_prebuilt_cubin_is_loaded(gpu, monkeypatch, tmp_path):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv(CUBIN_DIR_ENV, str(tmp_path))
    kernel = CudaKernel(SOURCE)
    with pytest.raises(KernelUnsupported, match=r"nvcc is not on PATH .* no sm_90a cubin"):
        kernel.launch("silu_and_mul_bf16", (1, 1, 1), (256, 1, 1), [FakeTensor(), 8])
    (tmp_path / cubin_name(SOURCE, "sm_90a")).write_bytes(b"prebuilt")
    kernel.launch("silu_and_mul_bf16", (1, 1, 1), (256, 1, 1), [FakeTensor(), 8])
    assert gpu["nvcc"] == 0 and gpu["cuLaunchKernel"] == 1
