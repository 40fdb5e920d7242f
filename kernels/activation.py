"""SwiGLU activation as vLLM's ``silu_and_mul``: ``out = silu(x[:, :I]) * x[:, I:]``.

``x`` is the output of the fused gate/up projection, so a token's gate and up operands sit in the
same row, I elements apart. The grid is (tokens, column blocks) of up to 1024 columns rather than
one row per program: a whole 14336-28672-wide row would need a 16K-32K-element register tile per
operand, and decode (1-16 tokens) would occupy only 1-16 SMs, while 1024-wide blocks give 14-28
programs per token and 8 elements (a 16-byte fp16 vector) per thread of 4 warps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Params, Tensors
from kernelwatch.kernels.inputs import next_pow2, randn

MAX_BLOCK = 1024


@triton.jit
def silu_and_mul_kernel(
    x_ptr,
    out_ptr,
    n_inter,
    stride_x_tok,
    stride_x_col,
    stride_out_tok,
    stride_out_col,
    BLOCK: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_inter
    x_row = x_ptr + tok * stride_x_tok
    gate = tl.load(x_row + cols * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(x_row + (cols + n_inter) * stride_x_col, mask=mask, other=0.0).to(tl.float32)
    # fp32 throughout and one rounding at the store; vLLM's CUDA kernel also rounds silu(gate)
    # to the input type before the multiply, so it differs from this by up to one ulp.
    y = gate * tl.sigmoid(gate) * up
    tl.store(
        out_ptr + tok * stride_out_tok + cols * stride_out_col,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _launch(x: torch.Tensor, out: torch.Tensor, cfg: LaunchConfig | None) -> LaunchConfig:
    tokens, n_inter = out.shape
    # A pinned config (the harness re-launches with the one returned) is used as given.
    config = cfg or LaunchConfig(
        {"BLOCK": min(MAX_BLOCK, next_pow2(n_inter))}, num_warps=4, num_stages=1
    )
    grid = (tokens, triton.cdiv(n_inter, config.meta["BLOCK"]))
    silu_and_mul_kernel[grid](
        x,
        out,
        n_inter,
        x.stride(0),
        x.stride(1),
        out.stride(0),
        out.stride(1),
        BLOCK=config.meta["BLOCK"],
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    shape = (int(p["tokens"]), 2 * int(p["intermediate"]))
    return {"x": randn(shape, dtype, device, gen, row_pad=int(p.get("row_pad", 0)))}


def _outputs(t: Tensors) -> dict[str, torch.Tensor]:
    tokens, width = t["x"].shape
    return {"out": torch.empty((tokens, width // 2), dtype=t["x"].dtype, device=t["x"].device)}


def _reference(t: Tensors) -> dict[str, torch.Tensor]:
    gate, up = t["x"].chunk(2, dim=-1)
    return {"out": gate * torch.sigmoid(gate) * up}


def _baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    gate, up = t["x"].chunk(2, dim=-1)
    return {"out": F.silu(gate) * up}


# Llama-3-8B (14336) and Llama-3-70B (28672) MLP intermediate sizes, decode to long prefill.
_LLM_CASES = tuple(
    {"tokens": t, "intermediate": i} for i in (14336, 28672) for t in (1, 16, 128, 2048, 16384)
)
# Tiny shapes for the CPU interpreter: one token whose 1100 columns span a full block and a
# 76-wide tail, strided rows (row_pad), a single column, and a width no block splits.
_SMOKE_CASES = (
    {"tokens": 1, "intermediate": 1100},
    {"tokens": 3, "intermediate": 40, "row_pad": 9},
    {"tokens": 4, "intermediate": 1},
    {"tokens": 5, "intermediate": 128},
)

SILU_AND_MUL = KernelSpec(
    name="silu_and_mul",
    summary="SwiGLU activation: silu(gate) * up over a fused gate/up projection (vLLM layout).",
    make_inputs=_inputs,
    make_outputs=lambda t, p: _outputs(t),
    launch=lambda t, o, p, cfg: _launch(t["x"], o["out"], cfg),
    reference=lambda t, p: _reference(t),
    baseline=Baseline("torch.nn.functional.silu * mul", _baseline),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # sigmoid as exp, add 1, divide; then times gate and times up
    flops=lambda p: 5 * int(p["tokens"]) * int(p["intermediate"]),
    min_bytes=lambda p, e: e * 3 * int(p["tokens"]) * int(p["intermediate"]),
)
