"""Causal flash-attention forward with grouped-query attention (GQA), FlashAttention-2 style,
and its sliding-window variant (each query sees its last ``window`` keys, as Mistral's and
Gemma's local layers do).

One program owns a block of query rows of one head and streams that head's keys and values
through an online softmax (running max and sum, rescaled as the max grows), so the score
matrix never leaves registers. Scores are kept in base 2: ``log2(e)`` is folded into the
softmax scale and ``exp2`` maps to the hardware's ``ex2``.

The causal mask is aligned bottom-right, as in FlashAttention, so decode (one query) and
chunked prefill (a query chunk after cached keys) are the same kernel as prefill. Key blocks
past a query block's causal frontier are never visited, and blocks that every row of the
query block sees skip the mask arithmetic; with a window, neither are key blocks before the
first row's window, and the blocks its lower edge cuts through are masked like the diagonal.
``WINDOW`` is a constexpr, so the plain causal kernel compiles without the window's code.
Query heads sharing a KV head are adjacent in the grid, so their K/V reads hit L2. Every
stride is passed: projections produce ``(batch, seq, heads, dim)`` tensors that attention
reads as ``(batch, heads, seq, dim)``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from kernelwatch.harness.spec import (
    DEFAULT_TOLERANCE,
    Baseline,
    KernelSpec,
    LaunchConfig,
    Params,
    Tensors,
)
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn
from kernelwatch.kernels.models import MISTRAL_7B
from kernelwatch.kernels.tuning import Tunable

LOG2_E = 1.4426950408889634


@triton.jit
def attend_key_blocks(
    state,
    q,
    kv,
    frontier,
    key_start,
    key_end,
    tile,
    CAUSAL_MASK: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WINDOW: tl.constexpr,
):
    """Stream the key blocks ``key_start..key_end`` through the online softmax.

    ``state`` is the running ``(acc, l_i, m_i)``; ``kv`` the head's ``(k_base, v_base,
    stride_kn, stride_kd, stride_vn, stride_vd)``; ``frontier`` the query rows and what
    decides which keys they see, ``(rows, causal_shift, seq_k, qk_scale)``; ``tile`` the
    block offsets ``(offs_n, offs_d, d_mask)``. ``WINDOW`` (0: none) keeps only a query's
    last ``WINDOW`` keys, itself included, under the mask. Returns the updated state.
    """
    acc, l_i, m_i = state
    k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd = kv
    rows, causal_shift, seq_k, qk_scale = frontier
    offs_n, offs_d, d_mask = tile
    for start_n in range(key_start, key_end, BLOCK_N):
        keys = start_n + offs_n
        keys64 = keys.to(tl.int64)
        kv_mask = (keys[:, None] < seq_k) & d_mask[None, :]
        k = tl.load(
            k_base + keys64[:, None] * stride_kn + offs_d[None, :] * stride_kd,
            mask=kv_mask,
            other=0.0,
        )
        # tf32 applies to fp32 operands only; fp16/bf16 products are exact in fp32.
        s = tl.dot(q, tl.trans(k), input_precision="tf32") * qk_scale
        if CAUSAL_MASK:
            # For every stored row this also drops keys >= seq_k; rows past seq_q are not
            # stored, so what they see does not matter.
            seen = keys[None, :] <= rows[:, None] + causal_shift
            if WINDOW > 0:
                seen = seen & (keys[None, :] > rows[:, None] + causal_shift - WINDOW)
            s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # Without a window, finite from the first block on: every row sees key 0, which lies
        # in that block.
        m_use = m_new
        if WINDOW > 0:
            # A row's first blocks may lie wholly before its window: its max is still -inf
            # there, and exp2(-inf - -inf) would be NaN; from 0 both factors are 0.
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_use)
        p = tl.math.exp2(s - m_use[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(
            v_base + keys64[:, None] * stride_vn + offs_d[None, :] * stride_vd,
            mask=kv_mask,
            other=0.0,
        )
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="tf32")
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def flash_attention_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    o_ptr,
    stride_qb,
    stride_qh,
    stride_qm,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_om,
    stride_od,
    n_heads_q,
    group_size,
    seq_q,
    seq_k,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WINDOW: tl.constexpr,
):
    batch_head = tl.program_id(0)
    # Causal work grows with the query block's index: launch the longest blocks first so
    # the short ones fill the tail of the grid.
    start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    batch = (batch_head // n_heads_q).to(tl.int64)
    head = batch_head % n_heads_q
    head_kv = (head // group_size).to(tl.int64)
    head = head.to(tl.int64)
    q_base = q_ptr + batch * stride_qb + head * stride_qh
    k_base = k_ptr + batch * stride_kb + head_kv * stride_kh
    v_base = v_ptr + batch * stride_vb + head_kv * stride_vh
    o_base = o_ptr + batch * stride_ob + head * stride_oh

    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rows64 = rows.to(tl.int64)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    q_mask = (rows[:, None] < seq_q) & d_mask[None, :]
    q = tl.load(
        q_base + rows64[:, None] * stride_qm + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0
    )

    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    # Query i sees keys j <= i + causal_shift (bottom-right alignment).
    causal_shift = seq_k - seq_q
    first_row = start_m * BLOCK_M
    # Keys below the first row's frontier are seen by every row of the block (and all lie
    # below seq_k); keys past the last row's frontier by none.
    full_end = (first_row + causal_shift + 1) // BLOCK_N * BLOCK_N
    key_end = min(first_row + BLOCK_M + causal_shift, seq_k)
    kv = (k_base, v_base, stride_kn, stride_kd, stride_vn, stride_vd)
    frontier = (rows, causal_shift, seq_k, qk_scale)
    tile = (offs_n, offs_d, d_mask)
    full_start = 0
    if WINDOW > 0:
        # Keys before the first row's window are seen by no row of the block; keys before the
        # last row's window by some rows only: those blocks are masked (stage 0).
        key_start = max(first_row + causal_shift - WINDOW + 1, 0) // BLOCK_N * BLOCK_N
        last_row = first_row + BLOCK_M - 1
        full_start = tl.cdiv(max(last_row + causal_shift - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
        full_start = min(max(full_start, key_start), full_end)
        acc, l_i, m_i = attend_key_blocks(
            (acc, l_i, m_i),
            q,
            kv,
            frontier,
            key_start,
            full_start,
            tile,
            CAUSAL_MASK=True,
            BLOCK_N=BLOCK_N,
            WINDOW=WINDOW,
        )
    # Stage 1, off the diagonal: key blocks every row of the query block sees in full, so
    # no mask arithmetic.
    acc, l_i, m_i = attend_key_blocks(
        (acc, l_i, m_i),
        q,
        kv,
        frontier,
        full_start,
        full_end,
        tile,
        CAUSAL_MASK=False,
        BLOCK_N=BLOCK_N,
        WINDOW=0,
    )
    # Stage 2, on the diagonal: the blocks the causal frontier cuts through, masked (a
    # window narrower than the block cuts them too).
    acc, l_i, m_i = attend_key_blocks(
        (acc, l_i, m_i),
        q,
        kv,
        frontier,
        full_end,
        key_end,
        tile,
        CAUSAL_MASK=True,
        BLOCK_N=BLOCK_N,
        WINDOW=WINDOW,
    )

    out = acc / l_i[:, None]
    tl.store(
        o_base + rows64[:, None] * stride_om + offs_d[None, :] * stride_od,
        out.to(o_ptr.dtype.element_ty),
        mask=q_mask,
    )


# Hopper/Blackwell tiles in the range Triton's fused-attention tutorial tunes over. At
# head_dim 128 in fp16 each compiles for sm_90a to wgmma without spilling; a 128-row tile
# needs 8 warps, since 4 cannot hold its fp32 accumulator. The 16-row tiles are for decode,
# where one query would otherwise idle the rest of a 64- or 128-row MMA.
ATTENTION_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": bm, "BLOCK_N": bn}, w, s)
    for bm, bn, w, s in (
        (128, 128, 8, 3),
        (128, 64, 8, 3),
        (128, 64, 8, 4),
        (64, 128, 8, 3),
        (64, 64, 4, 4),
        (64, 32, 4, 4),
        (16, 128, 4, 3),
        (16, 64, 4, 4),
    )
)
# Small enough for the CPU interpreter, which runs every program instance in Python.
ATTENTION_PINNED = LaunchConfig({"BLOCK_M": 16, "BLOCK_N": 16}, 4, 2)


ATTENTION_TUNABLE = Tunable(
    flash_attention_fwd_kernel, ATTENTION_CONFIGS, key=["seq_q", "seq_k", "HEAD_DIM", "WINDOW"]
)


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    config: LaunchConfig | None,
    window: int = 0,
) -> LaunchConfig:
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    if heads_q % heads_kv or k.shape != v.shape or out.shape != q.shape:
        raise ValueError(
            f"attention shapes do not match: q {tuple(q.shape)} k {tuple(k.shape)} "
            f"v {tuple(v.shape)} out {tuple(out.shape)}"
        )
    if seq_q > seq_k:
        raise ValueError(f"seq_q={seq_q} > seq_k={seq_k}: the first queries would see no key")
    args = (
        q,
        k,
        v,
        out,
        *q.stride(),
        *k.stride(),
        *v.stride(),
        *out.stride(),
        heads_q,
        heads_q // heads_kv,
        seq_q,
        seq_k,
        LOG2_E / math.sqrt(head_dim),
    )
    if window < 0:
        raise ValueError(f"window={window}: a query's keys, itself included (0: all)")
    dims = {"HEAD_DIM": head_dim, "BLOCK_D": next_pow2(head_dim), "WINDOW": window}

    def grid(meta: dict[str, int]) -> tuple[int, int]:
        return (batch * heads_q, triton.cdiv(seq_q, meta["BLOCK_M"]))

    return ATTENTION_TUNABLE.launch(grid, args, dims, config)


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    batch, dim = int(p["batch"]), int(p["head_dim"])
    layout = p["layout"]

    def heads(n_heads: int, seq: int) -> torch.Tensor:
        if layout == "bhsd":
            return randn((batch, n_heads, seq, dim), dtype, device, gen)
        if layout == "bshd":
            # What a QKV projection and a FlashAttention/vLLM KV cache hold.
            return randn((batch, seq, n_heads, dim), dtype, device, gen).transpose(1, 2)
        raise ValueError(f"layout must be 'bhsd' or 'bshd', got {layout!r}")

    heads_q, heads_kv = int(p["heads_q"]), int(p["heads_kv"])
    seq_q, seq_k = int(p["seq_q"]), int(p["seq_k"])
    return {"q": heads(heads_q, seq_q), "k": heads(heads_kv, seq_k), "v": heads(heads_kv, seq_k)}


# Scores materialised per reference chunk: 2^25 float64 values, 256 MiB.
_REF_CHUNK_SCORES = 1 << 25


def _attention_ref(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int = 0
) -> torch.Tensor:
    batch, heads_q, seq_q, dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    shift = seq_k - seq_q
    # Query head h reads KV head h // group. Stacking a group's query rows into one matmul
    # against its KV head avoids repeating K and V (1 GiB each in float64 for 70B at 16k).
    q = q.reshape(batch, heads_kv, group, seq_q, dim)
    out = torch.empty((batch, heads_q, seq_q, dim), dtype=q.dtype, device=q.device)
    chunk = max(1, _REF_CHUNK_SCORES // (batch * heads_q * seq_k))
    for start in range(0, seq_q, chunk):
        stop = min(start + chunk, seq_q)
        # Keys past the last query's frontier are masked for the whole chunk.
        n_keys = stop + shift
        rows_q = q[:, :, :, start:stop].reshape(batch, heads_kv, group * (stop - start), dim)
        s = rows_q @ k[:, :, :n_keys].transpose(-1, -2) / math.sqrt(dim)
        rows = torch.arange(start, stop, device=q.device).repeat(group)[:, None]
        keys = torch.arange(n_keys, device=q.device)[None, :]
        s = s.masked_fill(keys > rows + shift, float("-inf"))
        if window:  # query i sees its last `window` keys, itself included
            s = s.masked_fill(keys <= rows + shift - window, float("-inf"))
        o = torch.softmax(s, dim=-1) @ v[:, :, :n_keys]
        out[:, :, start:stop] = o.reshape(batch, heads_q, stop - start, dim)
    return out


def _sdpa_operands(t: Tensors) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, bool]:
    """Q, K and V as SDPA takes them, and whether its GQA is asked for."""
    q, k, v = t["q"], t["k"], t["v"]
    if q.dtype == torch.float32:
        # FlashAttention has no fp32 kernel, and SDPA's GQA falls back to the math backend,
        # which materialises every score (64 GiB for 70B at 16k): repeat K and V instead,
        # so the memory-efficient kernel takes fp32.
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return q, k, v, k.shape[1] != q.shape[1]


def _sdpa_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    q, k, v, gqa = _sdpa_operands(t)
    seq_q, seq_k = q.shape[2], k.shape[2]
    if seq_q == seq_k:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    else:
        # is_causal aligns the mask top-left; decode and chunked prefill need bottom-right.
        # Imported here: the module imports Dynamo, 2.3 s of CPU that every child loading
        # this suite (each check, bench and build) paid at import for this one baseline.
        from torch.nn.attention.bias import causal_lower_right

        mask = causal_lower_right(seq_q, seq_k)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)
    return {"out": out}


def _visible_pairs(p: Params) -> int:
    # Query i sees i + seq_k - seq_q + 1 keys.
    seq_q, seq_k = int(p["seq_q"]), int(p["seq_k"])
    return seq_q * (seq_k - seq_q) + seq_q * (seq_q + 1) // 2


def _min_bytes(p: Params, elem: int) -> int:
    batch, dim = int(p["batch"]), int(p["head_dim"])
    q_elems = batch * int(p["heads_q"]) * int(p["seq_q"]) * dim
    kv_elems = batch * int(p["heads_kv"]) * int(p["seq_k"]) * dim
    # q and out, k and v
    return elem * (2 * q_elems + 2 * kv_elems)


# Llama-3 8B (32 query heads) and 70B (64) share 8 KV heads of dim 128: single-sequence
# prefill, then batch-16 decode against a 1k and an 8k cache.
_LLM_CASES = tuple(
    {
        "batch": 1,
        "heads_q": hq,
        "heads_kv": 8,
        "seq_q": s,
        "seq_k": s,
        "head_dim": 128,
        "layout": "bshd",
    }
    for hq in (32, 64)
    for s in (512, 2048, 8192, 16384)
) + tuple(
    {
        "batch": 16,
        "heads_q": hq,
        "heads_kv": 8,
        "seq_q": 1,
        "seq_k": s,
        "head_dim": 128,
        "layout": "bshd",
    }
    for hq in (32, 64)
    for s in (1024, 8192)
)
# Interpreter shapes at the pinned 16x16 tiles: a sequence no block divides, a head_dim
# that is not a power of two, one decode query, and a query chunk after cached keys; GQA
# groups of 2 and (batch, seq, heads, dim) strides in all but the first.
_SMOKE_CASES = (
    {
        "batch": 1,
        "heads_q": 2,
        "heads_kv": 1,
        "seq_q": 40,
        "seq_k": 40,
        "head_dim": 32,
        "layout": "bhsd",
    },
    {
        "batch": 2,
        "heads_q": 2,
        "heads_kv": 2,
        "seq_q": 20,
        "seq_k": 20,
        "head_dim": 24,
        "layout": "bshd",
    },
    {
        "batch": 2,
        "heads_q": 4,
        "heads_kv": 2,
        "seq_q": 1,
        "seq_k": 47,
        "head_dim": 16,
        "layout": "bshd",
    },
    {
        "batch": 1,
        "heads_q": 2,
        "heads_kv": 1,
        "seq_q": 21,
        "seq_k": 38,
        "head_dim": 32,
        "layout": "bshd",
    },
)

FLASH_ATTENTION = KernelSpec(
    name="flash_attention",
    summary="Causal (bottom-right) flash-attention forward with GQA, any strides.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": empty_like_dense(t["q"])},
    launch=lambda t, o, p, cfg: _launch(t["q"], t["k"], t["v"], o["out"], cfg),
    reference=lambda t, p: {"out": _attention_ref(t["q"], t["k"], t["v"])},
    baseline=Baseline(
        "torch.nn.functional.scaled_dot_product_attention (FlashAttention)", _sdpa_baseline
    ),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # Two matmuls (QK^T and PV) of 2 * head_dim FLOPs per visible (query, key) pair.
    flops=lambda p: (
        4 * int(p["batch"]) * int(p["heads_q"]) * int(p["head_dim"]) * _visible_pairs(p)
    ),
    min_bytes=_min_bytes,
    # Both matmuls round their fp32 operands to TF32 (10 significand bits, like fp16): a
    # relative error near 4e-4, and 1.3e-3 where the hardware truncates instead of rounding.
    tolerance={**DEFAULT_TOLERANCE, "fp32": 5e-3},
    configs=ATTENTION_CONFIGS,
    pinned_config=ATTENTION_PINNED,
)


def _window(p: Params) -> int:
    return int(p["window"])


def _window_visible_pairs(p: Params) -> int:
    # Query i sees min(i + seq_k - seq_q + 1, window) keys.
    seq_q, seq_k, window = int(p["seq_q"]), int(p["seq_k"]), _window(p)
    return sum(min(i + seq_k - seq_q + 1, window) for i in range(seq_q))


def _window_min_bytes(p: Params, elem: int) -> int:
    # Only keys inside some query's window are read: from the first query's window start.
    seq_q, seq_k = int(p["seq_q"]), int(p["seq_k"])
    keys = seq_k - max(0, seq_k - seq_q + 1 - _window(p))
    return _min_bytes({**p, "seq_k": keys}, elem)


def _sliding_window_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    # SDPA with the window as a boolean mask, as vLLM's and HF's SDPA paths run local layers
    # (flex attention's block mask would skip the masked blocks, but needs torch.compile).
    q, k, v, gqa = _sdpa_operands(t)
    seq_q, seq_k = q.shape[2], k.shape[2]
    rows = torch.arange(seq_q, device=q.device)[:, None] + (seq_k - seq_q)
    keys = torch.arange(seq_k, device=q.device)[None, :]
    mask = (keys <= rows) & (keys > rows - _window(p))
    return {"out": F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)}


# Mistral 7B's local attention (every layer, a 4,096-key window): single-sequence prefill of
# 8k and 16k, where most keys fall outside a query's window, then batch-16 decode.
_SLIDING_LLM_CASES = tuple(
    {
        "model": MISTRAL_7B.name,
        "batch": batch,
        "heads_q": MISTRAL_7B["num_attention_heads"],
        "heads_kv": MISTRAL_7B["num_key_value_heads"],
        "seq_q": seq_q or seq_k,
        "seq_k": seq_k,
        "head_dim": MISTRAL_7B["head_dim"],
        "window": MISTRAL_7B["sliding_window"],
        "layout": "bshd",
    }
    for batch, seq_q in ((1, 0), (16, 1))
    for seq_k in (8192, 16384)
)
# Interpreter shapes at the pinned 16x16 tiles: a window no block divides, one narrower than a
# tile on a query chunk after cached keys, a decode query, and one wider than the sequence
# (plain causal attention).
_SLIDING_SMOKE_CASES = (
    {"batch": 1, "heads_q": 2, "heads_kv": 1, "seq_q": 40, "seq_k": 40, "head_dim": 32,
     "window": 9, "layout": "bhsd"},
    {"batch": 1, "heads_q": 2, "heads_kv": 1, "seq_q": 21, "seq_k": 38, "head_dim": 32,
     "window": 3, "layout": "bshd"},
    {"batch": 2, "heads_q": 4, "heads_kv": 2, "seq_q": 1, "seq_k": 47, "head_dim": 16,
     "window": 20, "layout": "bshd"},
    {"batch": 2, "heads_q": 2, "heads_kv": 2, "seq_q": 20, "seq_k": 20, "head_dim": 24,
     "window": 64, "layout": "bshd"},
)  # fmt: skip

# The causal kernel's spec with the window: the same inputs, outputs, tolerance and tiles.
SLIDING_WINDOW_ATTENTION = replace(
    FLASH_ATTENTION,
    name="sliding_window_attention",
    family=None,  # from its own name, as an undeclared family is
    summary="Causal flash-attention forward whose queries see only their last `window` keys "
    "(Mistral-style local layers), with GQA.",
    launch=lambda t, o, p, cfg: _launch(t["q"], t["k"], t["v"], o["out"], cfg, _window(p)),
    reference=lambda t, p: {"out": _attention_ref(t["q"], t["k"], t["v"], _window(p))},
    baseline=Baseline(
        "torch.nn.functional.scaled_dot_product_attention with a sliding-window mask",
        _sliding_window_baseline,
    ),
    workloads={"smoke": _SLIDING_SMOKE_CASES, "llm": _SLIDING_LLM_CASES},
    flops=lambda p: (
        4 * int(p["batch"]) * int(p["heads_q"]) * int(p["head_dim"]) * _window_visible_pairs(p)
    ),
    min_bytes=_window_min_bytes,
)
