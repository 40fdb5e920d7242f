"""FP8 with fine-grained scales, DeepSeek-V3's inference recipe: activations quantised to
e4m3 per token in groups of 128 channels (one fp32 scale per 1x128 tile), weights stored in
e4m3 with one fp32 scale per 128x128 block, products accumulated in fp32, output in bf16.

Two kernels: the per-token-group quantisation that produces the activations and their scales,
and the block-scaled GEMM that consumes them. The GEMM walks K one scale group at a time (its
``BLOCK_K`` divides the group), so each tile's fp32 product is multiplied by the row's
activation scale and the column block's weight scale before it joins the accumulator; the
MMA itself sees raw e4m3 operands, which is what keeps Hopper's fp8 wgmma (QGMMA) and
Blackwell's fp8 tcgen05 (UTCQMMA) on the path.

The same kernels take fp16 or fp32 operands with the same scales (the ``fp16``/``fp32`` cases):
the scale bookkeeping is then checked at those types' tight tolerances, apart from fp8's
rounding.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernelwatch.harness.device import INTERPRETER_GAPS
from kernelwatch.harness.spec import (
    DEFAULT_TOLERANCE,
    Baseline,
    KernelSpec,
    KernelUnsupported,
    LaunchConfig,
    Params,
    Tensors,
)
from kernelwatch.kernels.gemm import output_tile, tile_indices
from kernelwatch.kernels.inputs import blocky, expand_blocks
from kernelwatch.kernels.models import (
    DECODE_TOKENS,
    DEEPSEEK_V3,
    LLAMA_3_1_70B,
    PREFILL_TOKENS,
    dense_projections,
)
from kernelwatch.kernels.tuning import Tunable

FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max
#: Smallest amax a group is scaled by: an all-zero group gets a finite scale.
AMAX_EPS = 1e-10


@triton.jit
def group_quant_fp8_kernel(
    x_ptr,
    q_ptr,
    s_ptr,
    M,
    K,
    stride_xm,
    stride_qm,
    stride_sm,
    GROUP: tl.constexpr,
    BLOCK_M: tl.constexpr,
    FP8_MAX: tl.constexpr,
    EPS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    group = tl.program_id(1)
    cols = group * GROUP + tl.arange(0, GROUP)
    mask = (rows[:, None] < M) & (cols[None, :] < K)
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_xm + cols[None, :], mask=mask, other=0.0)
    x = x.to(tl.float32)
    amax = tl.maximum(tl.max(tl.abs(x), axis=1), EPS)
    scale = amax / FP8_MAX
    v = tl.minimum(tl.maximum(x / scale[:, None], -FP8_MAX), FP8_MAX)
    # Round to the e4m3 grid in fp32 before the cast: the cast is then exact on any backend.
    # A GPU's cvt.rn.satfinite rounds the same way (to nearest, ties to even), but Triton
    # 3.9's interpreter loses the carry when rounding up crosses a power of two (125.2 -> 64).
    # Adding and removing 1.5 * 2^(e + 20) rounds |v| < 2^(e + 1) to a multiple of 2^(e - 3),
    # e4m3's spacing there; below 2^-6 the spacing is the subnormals' 2^-9. The constant is
    # built from its bits, so no multiply is there to be fused into the add.
    bits = v.to(tl.int32, bitcast=True)
    exponent = tl.maximum(((bits >> 23) & 0xFF) - 127, -6)
    magic = (((exponent + 147) << 23) | 0x400000).to(tl.float32, bitcast=True)
    rounded = (tl.abs(v) + magic) - magic
    v = tl.where(v < 0, -rounded, rounded)
    tl.store(
        q_ptr + rows64[:, None] * stride_qm + cols[None, :], v.to(q_ptr.dtype.element_ty), mask
    )
    tl.store(s_ptr + rows64 * stride_sm + group, scale, mask=rows < M)


@triton.jit
def fp8_block_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsk,
    stride_bsn,
    GROUP_N: tl.constexpr,
    GROUP_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    rows, cols, rows_in, cols_in = tile_indices(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows_in[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols_in[None, :] * stride_bn
    a_scale_ptrs = a_scale_ptr + rows_in * stride_asm
    b_scale_ptrs = b_scale_ptr + (cols_in // GROUP_N) * stride_bsn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        # BLOCK_K divides GROUP_K, so the whole tile lies in one scale group.
        group = k * BLOCK_K // GROUP_K
        a_scale = tl.load(a_scale_ptrs + group * stride_ask)
        b_scale = tl.load(b_scale_ptrs + group * stride_bsk)
        partial = tl.dot(a, b, input_precision="tf32")
        acc += partial * a_scale[:, None] * b_scale[None, :]
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs, c_mask = output_tile(c_ptr, rows, cols, M, N, stride_cm, stride_cn)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)


# vLLM and SGLang's block-FP8 GEMMs tune over tiles like these: BLOCK_K is the scale group
# (128), so every tile is scaled once. All keep 64 or more rows a warpgroup: with 16 rows
# Triton widens the e4m3 operands to fp16 for mma.sync and the fp8 path is lost, while
# decode, memory-bound, does not miss the rows a 64-row tile leaves idle. The scaled partial
# product lives in registers beside the accumulator, so a 128x128 tile spilled even at 8
# warps (352 B on sm_100a) and is left out, as is 64x128 at 4 warps (80 B in fp16/bf16).
FP8_GEMM_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": 128, "GROUP_M": 8}, w, s)
    for bm, bn, w, s in (
        (128, 64, 8, 4),
        (128, 64, 8, 3),
        (64, 128, 8, 4),
        (64, 64, 4, 5),
        (64, 64, 4, 3),
    )
)
# Small enough for the CPU interpreter; BLOCK_K 64 splits each 128-group in two, so the
# interpreter checks that tiles inside one group share its scale.
FP8_GEMM_PINNED = LaunchConfig({"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 4}, 4, 2)
FP8_GEMM_TUNABLE = Tunable(fp8_block_gemm_kernel, FP8_GEMM_CONFIGS, key=["M", "N", "K"])

_QUANT_ROWS = 4


def quantize_groups(x: torch.Tensor, q: torch.Tensor, scales: torch.Tensor, group: int) -> None:
    """Per-token-group quantisation of ``x`` (M, K) into ``q`` (e4m3) and ``scales``
    (M, ceil(K / group), fp32)."""
    m, k = x.shape
    if x.stride(1) != 1 or q.stride(1) != 1 or scales.shape != (m, triton.cdiv(k, group)):
        raise ValueError(
            f"quantize_groups needs unit column strides and (M, K/group) scales: x "
            f"{tuple(x.shape)} q {tuple(q.shape)} scales {tuple(scales.shape)} group {group}"
        )
    group_quant_fp8_kernel[(triton.cdiv(m, _QUANT_ROWS), triton.cdiv(k, group))](
        x,
        q,
        scales,
        m,
        k,
        x.stride(0),
        q.stride(0),
        scales.stride(0),
        GROUP=group,
        BLOCK_M=_QUANT_ROWS,
        FP8_MAX=FP8_MAX,
        EPS=AMAX_EPS,
        num_warps=4,
    )


def block_scaled_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scales: torch.Tensor,
    b_scales: torch.Tensor,
    c: torch.Tensor,
    block: int,
    config: LaunchConfig | None,
) -> LaunchConfig:
    """``c = (a * a_scales) @ (b * b_scales)``: ``a`` (M, K) with a scale per row and K-group,
    ``b`` (K, N) with one per K-group and N-group (``b_scales`` (K/block, N/block))."""
    (m, k), (k_b, n) = a.shape, b.shape
    if c.device.type == "cpu" and c.dtype == torch.bfloat16:
        raise KernelUnsupported(INTERPRETER_GAPS["bf16"])
    groups_k, groups_n = triton.cdiv(k, block), triton.cdiv(n, block)
    if k != k_b or a_scales.shape != (m, groups_k) or b_scales.shape != (groups_k, groups_n):
        raise ValueError(
            f"block-scaled gemm shapes do not chain: A {tuple(a.shape)} B {tuple(b.shape)} "
            f"scales {tuple(a_scales.shape)} and {tuple(b_scales.shape)} at block {block}"
        )
    candidates = FP8_GEMM_TUNABLE.configs if config is None else (config,)
    if any(block % cfg.meta["BLOCK_K"] for cfg in candidates):
        raise ValueError(f"a scale block of {block} is not a multiple of every BLOCK_K tuned over")
    args = (a, b, c, a_scales, b_scales, m, n, k, *a.stride(), *b.stride(), *c.stride())
    args += (*a_scales.stride(), *b_scales.stride())

    def grid(meta: dict[str, int]) -> tuple[int]:
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    return FP8_GEMM_TUNABLE.launch(grid, args, {"GROUP_N": block, "GROUP_K": block}, config)


def _group_amax(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """The amax of every ``rows`` x ``cols`` block of ``x`` (tails included)."""
    m, k = x.shape
    padded = torch.zeros(
        (triton.cdiv(m, rows) * rows, triton.cdiv(k, cols) * cols), dtype=x.dtype, device=x.device
    )
    padded[:m, :k] = x.abs()
    blocks = padded.reshape(padded.shape[0] // rows, rows, padded.shape[1] // cols, cols)
    return blocks.amax(dim=(1, 3))


def _scaled(
    shape: tuple[int, int],
    block: tuple[int, int],
    dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Values stored in ``dtype`` and their fp32 block scales, as a quantiser leaves them."""
    values = blocky(shape, block, device, gen)
    if values.device.type == "meta":
        groups = (triton.cdiv(shape[0], block[0]), triton.cdiv(shape[1], block[1]))
        return values.to(dtype), torch.empty(groups, dtype=torch.float32, device=values.device)
    scales = _group_amax(values, *block).clamp(min=AMAX_EPS) / FP8_MAX
    return (values / expand_blocks(scales, *block, values.shape)).to(dtype), scales


def _gemm_inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    m, n, k, block = int(p["m"]), int(p["n"]), int(p["k"]), int(p["block"])
    a, a_scales = _scaled((m, k), (1, block), dtype, device, gen)
    # nn.Linear's (N, K) weight, read as (K, N): the K-major operand fp8 wgmma wants.
    w, w_scales = _scaled((n, k), (block, block), dtype, device, gen)
    return {"a": a, "a_scales": a_scales, "b": w.t(), "b_scales": w_scales.t()}


def _out_dtype(t: Tensors, p: Params) -> torch.dtype:
    if t["a"].dtype == FP8:
        return {"bf16": torch.bfloat16, "fp16": torch.float16}[str(p["fp8_out"])]
    return t["a"].dtype


def _dequantized(t: Tensors, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    a = t["a"].to(t["a_scales"].dtype) * expand_blocks(t["a_scales"], 1, block, t["a"].shape)
    b = t["b"].to(t["b_scales"].dtype) * expand_blocks(t["b_scales"], block, block, t["b"].shape)
    return a, b


def _gemm_reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    a, b = _dequantized(t, int(p["block"]))
    return {"c": a @ b}


def _gemm_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    out = _out_dtype(t, p)
    if t["a"].dtype != FP8:
        a, b = _dequantized(t, int(p["block"]))
        return {"c": (a.to(out) @ b.to(out))}
    # cuBLAS's FP8 GEMM scales whole rows and columns, not 128-blocks: the same traffic and
    # MMAs, coarser numerics. Row-wise scales take a bf16 output; fp16 gets per-tensor ones.
    row_wise = out == torch.bfloat16
    a_scale = t["a_scales"].amax(1, keepdim=True) if row_wise else t["a_scales"].amax()
    b_scale = t["b_scales"].amax(0, keepdim=True) if row_wise else t["b_scales"].amax()
    if row_wise:
        b_scale = b_scale.repeat_interleave(int(p["block"]), dim=1)[:, : t["b"].shape[1]]
    return {
        "c": torch._scaled_mm(
            t["a"], t["b"], scale_a=a_scale, scale_b=b_scale.contiguous(), out_dtype=out
        )
    }


def _gemm_min_bytes(p: Params, elem: int) -> int:
    m, n, k, block = int(p["m"]), int(p["n"]), int(p["k"]), int(p["block"])
    groups_k = math.ceil(k / block)
    out_elem = 2 if elem == 1 else elem
    scales = 4 * (m * groups_k + groups_k * math.ceil(n / block))
    return elem * (m * k + n * k) + out_elem * m * n + scales


# DeepSeek-V3's FP8 projections (weight_block_size 128): the fused q_a and kv_a projection
# (hidden_size -> q_lora_rank + kv_lora_rank + qk_rope_head_dim), q_b (q_lora_rank ->
# heads x (qk_nope_head_dim + qk_rope_head_dim)), o_proj (heads x v_head_dim -> hidden_size)
# and the dense layers' MLP (intermediate_size); and Llama-3.1-70B's projections served in
# FP8 with the same blocks.
def _deepseek_projections() -> tuple[tuple[str, int, int], ...]:
    m = DEEPSEEK_V3
    heads, hidden = m["num_attention_heads"], m["hidden_size"]
    return (
        ("q_a_kv_a_proj", hidden, m["q_lora_rank"] + m["kv_lora_rank"] + m["qk_rope_head_dim"]),
        ("q_b_proj", m["q_lora_rank"], heads * (m["qk_nope_head_dim"] + m["qk_rope_head_dim"])),
        ("o_proj", heads * m["v_head_dim"], hidden),
        ("gate_up_proj", hidden, 2 * m["intermediate_size"]),
        ("down_proj", m["intermediate_size"], hidden),
    )


_FP8_PROJECTIONS = tuple((DEEPSEEK_V3, *w) for w in _deepseek_projections())
_FP8_PROJECTIONS += tuple((LLAMA_3_1_70B, *w) for w in dense_projections(LLAMA_3_1_70B))


def _gemm_cases(tokens: tuple[int, ...]) -> tuple[Params, ...]:
    return tuple(
        {
            "m": m,
            "n": n,
            "k": k,
            "block": DEEPSEEK_V3["weight_block_size"],
            "fp8_out": "bf16",
            "model": model.name,
            "weight": weight,
        }
        for model, weight, k, n in _FP8_PROJECTIONS
        for m in tokens
    )


# Interpreter shapes at the pinned 16x32x64 tiles, fp8 cases writing fp16 (the interpreter
# rounds to bf16 wrongly): one token; M, N and K no tile divides, with a partial last scale
# group in N and in K; and three K-groups.
_GEMM_SMOKE = (
    {"m": 1, "n": 160, "k": 256, "block": 128, "fp8_out": "fp16"},
    {"m": 33, "n": 136, "k": 200, "block": 128, "fp8_out": "fp16"},
    {"m": 20, "n": 48, "k": 384, "block": 128, "fp8_out": "fp16"},
)

FP8_BLOCK_GEMM = KernelSpec(
    name="fp8_block_gemm",
    summary="C = (A x 1x128 scales) @ (W x 128x128 scales): e4m3 operands, fp32 accumulation.",
    make_inputs=_gemm_inputs,
    make_outputs=lambda t, p: {
        "c": torch.empty(
            (t["a"].shape[0], t["b"].shape[1]), dtype=_out_dtype(t, p), device=t["a"].device
        )
    },
    launch=lambda t, o, p, cfg: block_scaled_gemm(
        t["a"], t["b"], t["a_scales"], t["b_scales"], o["c"], int(p["block"]), cfg
    ),
    reference=_gemm_reference,
    baseline=Baseline(
        "torch._scaled_mm (cuBLAS FP8, row-wise scales); the dequantised matmul for fp16/fp32",
        _gemm_baseline,
    ),
    workloads={
        "smoke": _GEMM_SMOKE,
        "decode": _gemm_cases(DECODE_TOKENS),
        "llm": _gemm_cases(DECODE_TOKENS + PREFILL_TOKENS),
    },
    flops=lambda p: 2 * int(p["m"]) * int(p["n"]) * int(p["k"]),
    min_bytes=_gemm_min_bytes,
    dtypes=("fp8", "fp16", "fp32", "bf16"),
    # fp8 products are exact in fp32, so what is left is the output's rounding (bf16 in the
    # recipe). fp32 operands go through TF32 tensor cores, as in gemm.py.
    tolerance={**DEFAULT_TOLERANCE, "fp8": DEFAULT_TOLERANCE["bf16"], "fp32": 5e-3},
    configs=FP8_GEMM_CONFIGS,
    pinned_config=FP8_GEMM_PINNED,
)


def _quant_inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    m, k, group = int(p["m"]), int(p["k"]), int(p["group"])
    pad = int(p.get("row_pad", 0))
    x = blocky((m, k + pad), (1, group), device, gen).to(dtype)
    if pad:
        # NaN past column K: a group that reads it gets a NaN scale.
        x[:, k:] = float("nan")
        x = x[:, :k]
    return {"x": x}


def _torch_quant(x: torch.Tensor, group: int) -> dict[str, torch.Tensor]:
    """The same quantisation in torch, in ``x``'s precision: the e4m3 value nearest to
    x / scale, and the scales."""
    scales = _group_amax(x, 1, group).clamp(min=AMAX_EPS) / FP8_MAX
    q = (x / expand_blocks(scales, 1, group, x.shape)).clamp(-FP8_MAX, FP8_MAX)
    return {"q": q.to(FP8), "scales": scales}


def _quant_reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    out = _torch_quant(t["x"], int(p["group"]))
    return {"q": out["q"].to(t["x"].dtype), "scales": out["scales"]}


def _quant_outputs(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    (m, k), device = t["x"].shape, t["x"].device
    groups = triton.cdiv(k, int(p["group"]))
    return {
        "q": torch.empty((m, k), dtype=FP8, device=device),
        "scales": torch.empty((m, groups), dtype=torch.float32, device=device),
    }


def _quant_launch(t: Tensors, o: Tensors, p: Params) -> LaunchConfig:
    quantize_groups(t["x"], o["q"], o["scales"], int(p["group"]))
    return LaunchConfig({"BLOCK_M": _QUANT_ROWS, "GROUP": int(p["group"])}, 4, 1)


# The activations entering DeepSeek-V3's FP8 projections: hidden_size (q_a/kv_a, gate_up),
# heads x v_head_dim (o_proj), intermediate_size (down), in groups of weight_block_size.
_QUANT_WIDTHS = (
    DEEPSEEK_V3["hidden_size"],
    DEEPSEEK_V3["num_attention_heads"] * DEEPSEEK_V3["v_head_dim"],
    DEEPSEEK_V3["intermediate_size"],
)


def _quant_cases(tokens: tuple[int, ...]) -> tuple[Params, ...]:
    group = DEEPSEEK_V3["weight_block_size"]
    return tuple(
        {"m": m, "k": k, "group": group, "model": DEEPSEEK_V3.name}
        for k in _QUANT_WIDTHS
        for m in tokens
    )


# One token; rows no program's 4 divide; strided rows; a partial last group.
_QUANT_SMOKE = (
    {"m": 1, "k": 256, "group": 128},
    {"m": 7, "k": 384, "group": 128, "row_pad": 16},
    {"m": 5, "k": 200, "group": 64},
)

FP8_GROUP_QUANT = KernelSpec(
    name="fp8_group_quant",
    summary="Per-token-group FP8 quantisation: e4m3 values and an fp32 scale per 1x128 tile.",
    make_inputs=_quant_inputs,
    make_outputs=_quant_outputs,
    launch=lambda t, o, p, cfg: _quant_launch(t, o, p),
    reference=_quant_reference,
    baseline=Baseline(
        "torch amax / div / cast to float8_e4m3fn",
        lambda t, p: _torch_quant(t["x"].float(), int(p["group"])),
    ),
    workloads={
        "smoke": _QUANT_SMOKE,
        "decode": _quant_cases(DECODE_TOKENS),
        "llm": _quant_cases(DECODE_TOKENS + PREFILL_TOKENS),
    },
    # abs, max, divide (and the clamp and round, which are not counted as arithmetic)
    flops=lambda p: 3 * int(p["m"]) * int(p["k"]),
    min_bytes=lambda p, e: (
        (e + 1) * int(p["m"]) * int(p["k"])
        + 4 * int(p["m"]) * math.ceil(int(p["k"]) / int(p["group"]))
    ),
    dtypes=("fp32", "fp16", "bf16"),
)
