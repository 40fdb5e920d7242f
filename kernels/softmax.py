"""Row softmax over the last dimension, one row per program.

The row is held in registers as one power-of-two tile, as in Triton's fused-softmax tutorial and
Liger-Kernel: the max, the exponentials and their sum all come from a single read of the input,
so the kernel moves the minimum of one read and one write per element. Attention-score and
logits rows up to 32K columns fit with 32 warps (sm_90a: 50 registers a thread, no spills); a
64K tile already spills at the 64-register ceiling of a 1024-thread block, so wider rows (and
Llama-3's 128,256-entry vocabulary) need an online, blocked softmax and are refused.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Params
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn, warps_for_row

MAX_COLS = 32768


@triton.jit
def softmax_kernel(
    x_ptr,
    out_ptr,
    n_cols,
    stride_x_row,
    stride_x_col,
    stride_out_row,
    stride_out_col,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    # -inf padding never wins the max and contributes exp(-inf) = 0 to the sum.
    x = tl.load(
        x_ptr + row * stride_x_row + cols * stride_x_col, mask=mask, other=-float("inf")
    ).to(tl.float32)
    # Softmax is shift-invariant; subtracting the max keeps exp() finite for any finite logits.
    num = tl.exp(x - tl.max(x, axis=0))
    y = num / tl.sum(num, axis=0)
    tl.store(
        out_ptr + row * stride_out_row + cols * stride_out_col,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _launch(x: torch.Tensor, out: torch.Tensor) -> LaunchConfig:
    rows, n_cols = x.shape
    if n_cols > MAX_COLS:
        raise ValueError(f"softmax holds a row in registers; cols={n_cols} > {MAX_COLS}")
    block = next_pow2(n_cols)
    config = LaunchConfig({"BLOCK_N": block}, num_warps=warps_for_row(block), num_stages=1)
    softmax_kernel[(rows,)](
        x,
        out,
        n_cols,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK_N=block,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    shape = (int(p["rows"]), int(p["cols"]))
    shift = float(p.get("shift", 0.0))
    return {"x": randn(shape, dtype, device, gen, shift=shift, row_pad=int(p.get("row_pad", 0)))}


# Attention-score rows (sequence lengths 1K-32K) and logits rows of Llama-2/Mistral's 32,000-entry
# vocabulary, from a single decode row to a long prefill's worth of rows.
_LLM_CASES = tuple(
    {"rows": r, "cols": c} for c in (1024, 4096, 32000, 32768) for r in (1, 16, 128, 2048, 16384)
)
# Tiny shapes for the CPU interpreter: a single row no power of two divides, strided rows
# (row_pad), logits around +100 whose exp() overflows fp32 unless the max is subtracted, and a
# one-column row (output exactly 1).
_SMOKE_CASES = (
    {"rows": 1, "cols": 33},
    {"rows": 3, "cols": 100, "row_pad": 7},
    {"rows": 4, "cols": 64, "shift": 100.0},
    {"rows": 2, "cols": 1},
)

SOFTMAX = KernelSpec(
    name="softmax",
    summary="Numerically stable softmax over the last dimension (attention scores, logits).",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": empty_like_dense(t["x"])},
    launch=lambda t, o, p, cfg: _launch(t["x"], o["out"]),
    reference=lambda t, p: {"out": torch.softmax(t["x"], dim=-1)},
    baseline=Baseline("torch.softmax", lambda t, p: {"out": torch.softmax(t["x"], dim=-1)}),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # max-compare, subtract max, exp, sum-accumulate, divide by the sum
    flops=lambda p: 5 * int(p["rows"]) * int(p["cols"]),
    min_bytes=lambda p, e: e * 2 * int(p["rows"]) * int(p["cols"]),
)
