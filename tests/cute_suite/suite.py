"""A suite whose kernel is written in the CuTe DSL (tests/test_cute.py): SiLU-and-mul over
a flat buffer, one element a thread."""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import torch

from kernelwatch.harness.cute_kernel import CuteKernel
from kernelwatch.harness.spec import Baseline, KernelSpec, Suite

THREADS = 128


@cute.kernel
def silu_mul_kernel(g_gate: cute.Tensor, g_up: cute.Tensor, g_out: cute.Tensor, n: cutlass.Int32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * THREADS + tidx
    if i < n:
        gate = g_gate[i]
        g_out[i] = gate / (1.0 + cute.math.exp(-gate)) * g_up[i]


@cute.jit
def silu_mul(gate: cute.Tensor, up: cute.Tensor, out: cute.Tensor, n: cutlass.Int32):
    blocks = (cute.size(gate) + THREADS - 1) // THREADS
    silu_mul_kernel(gate, up, out, n).launch(grid=(blocks, 1, 1), block=(THREADS, 1, 1))


KERNEL = CuteKernel(silu_mul)


def _inputs(p, dtype, device, gen):
    n = int(p["n"])
    return {
        "gate": torch.empty(n, dtype=torch.float32, device=device),
        "up": torch.empty(n, dtype=torch.float32, device=device),
    }


SILU_MUL_CUTE = KernelSpec(
    name="silu_mul_cute",
    summary="SiLU(gate) * up, one element a thread, in the CuTe DSL.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": torch.empty_like(t["gate"])},
    launch=lambda t, o, p, cfg: KERNEL.launch(t["gate"], t["up"], o["out"], int(p["n"])),
    reference=lambda t, p: {"out": torch.nn.functional.silu(t["gate"].double()) * t["up"]},
    baseline=Baseline(
        "torch silu * up", lambda t, p: {"out": torch.nn.functional.silu(t["gate"]) * t["up"]}
    ),
    workloads={"smoke": ({"n": 1000},), "llm": ({"n": 1 << 20},)},
    flops=lambda p: 5 * int(p["n"]),
    min_bytes=lambda p, e: 3 * 4 * int(p["n"]),
    dtypes=("fp32",),
)

SUITE = Suite("cute_demo", (SILU_MUL_CUTE,))
