"""SwiGLU (``silu_and_mul``) in CUDA C++ with hand-written 128-bit non-coherent loads.

The same operation and layout as ``activation.py``'s Triton kernel, written the way vLLM's
CUDA activation kernels are, to keep kernelwatch honest about CUDA C++: the build stage
compiles it with ``nvcc`` and reads its SASS exactly as it does Triton's, and on a GPU it goes
through the same correctness and timing harness. On the CPU it is compile-only: its cases
report ``unsupported`` (``harness/cuda_kernel.py``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from kernelwatch.harness.cuda_kernel import CudaKernel
from kernelwatch.harness.spec import LaunchConfig
from kernelwatch.kernels.activation import SILU_AND_MUL

KERNEL = CudaKernel(Path(__file__).parent / "cuda" / "silu_and_mul.cu")
ENTRIES = {
    torch.float32: "silu_and_mul_f32",
    torch.float16: "silu_and_mul_f16",
    torch.bfloat16: "silu_and_mul_bf16",
}
THREADS = 256


def _launch(x: torch.Tensor, out: torch.Tensor) -> LaunchConfig:
    tokens, n_inter = out.shape
    if x.stride(1) != 1 or out.stride(1) != 1 or x.shape != (tokens, 2 * n_inter):
        raise ValueError(
            f"silu_and_mul_cuda needs unit column strides and x of (tokens, 2 * I): "
            f"x {tuple(x.shape)} strides {x.stride()}, out {tuple(out.shape)}"
        )
    # A thread moves one 16-byte vector of gate and of up.
    vec = 16 // x.element_size()
    grid = (tokens, -(-n_inter // (vec * THREADS)), 1)
    KERNEL.launch(
        ENTRIES[x.dtype], grid, (THREADS, 1, 1), [out, x, n_inter, x.stride(0), out.stride(0)]
    )
    return LaunchConfig({"THREADS": THREADS, "VEC": vec}, num_warps=THREADS // 32, num_stages=1)


# Shares the Triton kernel's workloads, reference, baseline and models, so the two
# implementations of one operation are measured on the same cases.
SILU_AND_MUL_CUDA = replace(
    SILU_AND_MUL,
    name="silu_and_mul_cuda",
    summary="SwiGLU silu(gate) * up in CUDA C++ with inline-PTX 128-bit ld.global.nc loads.",
    launch=lambda t, o, p, cfg: _launch(t["x"], o["out"]),
)
