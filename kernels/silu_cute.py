"""SwiGLU (``silu_and_mul``) in the CuTe DSL (``cute_dsl/silu_and_mul.py``), the third
implementation of one operation beside the Triton kernel (``activation.py``) and the CUDA C++
one (``silu_cuda.py``), on the same cases, reference and baseline.

The function is named, not imported, so the built-in suite imports without the optional
``nvidia-cutlass-dsl``: the build stage compiles it offline for each target from fake tensors
of the recorded dtypes (its layouts are dynamic: one compile a dtype and target), and on a GPU
the harness compiles it once a dtype and launches it.
On the CPU its cases are ``unsupported`` (``harness/cute_kernel.py``).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from kernelwatch.harness.cute_kernel import CuteKernel
from kernelwatch.harness.spec import LaunchConfig
from kernelwatch.kernels.activation import SILU_AND_MUL

# Dynamic layouts: one compile a dtype and target serves every token count, width and row
# stride (compiled in, each of the ten llm cases would be a compile of its own).
KERNEL = CuteKernel("kernelwatch.kernels.cute_dsl.silu_and_mul:silu_and_mul", dynamic=True)
#: Threads per block, a compile-time constant of the DSL kernel.
THREADS = 256


def _launch(x: torch.Tensor, out: torch.Tensor) -> LaunchConfig:
    tokens, n_inter = out.shape
    if x.shape != (tokens, 2 * n_inter):
        raise ValueError(
            f"silu_and_mul_cute needs x of (tokens, 2 * I): x {tuple(x.shape)}, "
            f"out {tuple(out.shape)}"
        )
    KERNEL.launch(x, out, THREADS)
    return LaunchConfig({"THREADS": THREADS}, num_warps=THREADS // 32, num_stages=1)


# Shares the Triton kernel's workloads, reference, baseline and models, so the three
# implementations of one operation are measured on the same cases.
SILU_AND_MUL_CUTE = replace(
    SILU_AND_MUL,
    name="silu_and_mul_cute",
    summary="SwiGLU silu(gate) * up in the CuTe DSL, one element a thread.",
    launch=lambda t, o, p, cfg: _launch(t["x"], o["out"]),
)
