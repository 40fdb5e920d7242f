"""RMSNorm and fused residual-add + RMSNorm (Llama-style pre-norm), one row per program.

The row is held in registers as one power-of-two tile, as in Liger-Kernel and vLLM: hidden
sizes of LLMs (4096, 5120, 8192) fit with 8-16 warps and need a single read of the input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Params, Tensors
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn, warps_for_row

MAX_HIDDEN = 32768
EPS = 1e-6


@triton.jit
def rms_norm_kernel(
    x_ptr,
    res_ptr,
    w_ptr,
    out_ptr,
    res_out_ptr,
    n_cols,
    stride_x_row,
    stride_x_col,
    stride_res_row,
    stride_res_col,
    stride_out_row,
    stride_out_col,
    stride_res_out_row,
    stride_res_out_col,
    eps,
    HAS_RESIDUAL: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x_row + cols * stride_x_col, mask=mask, other=0.0)
    x = x.to(tl.float32)
    if HAS_RESIDUAL:
        r = tl.load(res_ptr + row * stride_res_row + cols * stride_res_col, mask=mask, other=0.0)
        x = x + r.to(tl.float32)
        # The next layer adds to the rounded residual, so normalise exactly what is stored.
        x_stored = x.to(res_out_ptr.dtype.element_ty)
        tl.store(
            res_out_ptr + row * stride_res_out_row + cols * stride_res_out_col, x_stored, mask=mask
        )
        x = x_stored.to(tl.float32)
    mean_sq = tl.sum(x * x, axis=0) / n_cols
    rstd = tl.rsqrt(mean_sq + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = x * rstd * w
    tl.store(
        out_ptr + row * stride_out_row + cols * stride_out_col,
        y.to(out_ptr.dtype.element_ty),
        mask=mask,
    )


def _launch(
    x: torch.Tensor,
    res: torch.Tensor | None,
    w: torch.Tensor,
    out: torch.Tensor,
    res_out: torch.Tensor | None,
    eps: float,
) -> LaunchConfig:
    rows, n_cols = x.shape
    if n_cols > MAX_HIDDEN:
        raise ValueError(f"rms_norm holds a row in registers; hidden={n_cols} > {MAX_HIDDEN}")
    block = next_pow2(n_cols)
    config = LaunchConfig({"BLOCK_N": block}, num_warps=warps_for_row(block), num_stages=1)
    has_res = res is not None
    # Without a residual the residual pointers are never dereferenced (HAS_RESIDUAL=False).
    res_, res_out_ = (res, res_out) if has_res else (x, out)
    rms_norm_kernel[(rows,)](
        x,
        res_,
        w,
        out,
        res_out_,
        n_cols,
        x.stride(0),
        x.stride(1),
        res_.stride(0),
        res_.stride(1),
        out.stride(0),
        out.stride(1),
        res_out_.stride(0),
        res_out_.stride(1),
        eps,
        HAS_RESIDUAL=has_res,
        BLOCK_N=block,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config


def _rms_norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * w


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator, residual: bool
) -> dict[str, torch.Tensor]:
    shape = (int(p["tokens"]), int(p["hidden"]))
    pad = int(p.get("row_pad", 0))
    inputs = {"x": randn(shape, dtype, device, gen, row_pad=pad)}
    if residual:
        inputs["residual"] = randn(shape, dtype, device, gen, row_pad=pad)
    # Trained norm weights sit around 1; a constant 1 would hide a missing multiply.
    inputs["weight"] = randn(shape[1:], dtype, device, gen, scale=0.2, shift=1.0)
    return inputs


# Llama-2/3 7B-8B (4096), 13B (5120) and 70B (8192) hidden sizes, decode to long prefill.
_LLM_CASES = tuple(
    {"tokens": t, "hidden": h} for h in (4096, 5120, 8192) for t in (1, 16, 128, 2048, 16384)
)
# Tiny shapes for the CPU interpreter: a single row, a hidden size no block divides evenly,
# strided rows (row_pad), and a power of two.
_SMOKE_CASES = (
    {"tokens": 1, "hidden": 64},
    {"tokens": 3, "hidden": 33, "row_pad": 7},
    {"tokens": 5, "hidden": 128},
    {"tokens": 2, "hidden": 1},
)

RMS_NORM = KernelSpec(
    name="rms_norm",
    summary="RMSNorm over the last dimension with a learned scale (Llama pre-norm).",
    make_inputs=lambda p, dtype, device, gen: _inputs(p, dtype, device, gen, residual=False),
    make_outputs=lambda t, p: {"out": empty_like_dense(t["x"])},
    launch=lambda t, o, p, cfg: _launch(t["x"], None, t["weight"], o["out"], None, EPS),
    reference=lambda t, p: {"out": _rms_norm_ref(t["x"], t["weight"], EPS)},
    baseline=Baseline(
        "torch.nn.functional.rms_norm",
        lambda t, p: {"out": F.rms_norm(t["x"], (t["x"].shape[-1],), t["weight"], EPS)},
    ),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # square, mean-accumulate, scale by rstd, scale by weight
    flops=lambda p: 4 * int(p["tokens"]) * int(p["hidden"]),
    min_bytes=lambda p, e: e * (2 * int(p["tokens"]) * int(p["hidden"]) + int(p["hidden"])),
)


def _fused_ref(t: Tensors) -> dict[str, torch.Tensor]:
    h = t["x"] + t["residual"]
    return {"out": _rms_norm_ref(h, t["weight"], EPS), "residual_out": h}


def _fused_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    h = t["x"] + t["residual"]
    return {"out": F.rms_norm(h, (h.shape[-1],), t["weight"], EPS), "residual_out": h}


FUSED_ADD_RMS_NORM = KernelSpec(
    name="fused_add_rms_norm",
    summary="Residual add then RMSNorm in one pass; writes the new residual and the norm.",
    make_inputs=lambda p, dtype, device, gen: _inputs(p, dtype, device, gen, residual=True),
    make_outputs=lambda t, p: {
        "out": empty_like_dense(t["x"]),
        "residual_out": empty_like_dense(t["x"]),
    },
    launch=lambda t, o, p, cfg: _launch(
        t["x"], t["residual"], t["weight"], o["out"], o["residual_out"], EPS
    ),
    reference=lambda t, p: _fused_ref(t),
    baseline=Baseline("torch add + torch.nn.functional.rms_norm", _fused_baseline),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # add, square, mean-accumulate, scale by rstd, scale by weight
    flops=lambda p: 5 * int(p["tokens"]) * int(p["hidden"]),
    min_bytes=lambda p, e: e * (4 * int(p["tokens"]) * int(p["hidden"]) + int(p["hidden"])),
)
