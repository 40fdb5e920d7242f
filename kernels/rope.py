"""Rotary position embedding, NeoX style (rotate halves), on q and k, one token per program.

This is the layout vLLM's default ``RotaryEmbedding`` and Hugging Face's Llama use: dimension i
of the first half pairs with dimension i of the second half, rotated by ``pos * inv_freq[i]``.
A program takes one token and loops over its q heads and then its k heads in blocks, as vLLM's
CUDA ``rotary_embedding`` kernel does with one thread block per token: the cos/sin row is a
gather at a data-dependent position, so it is loaded once and reused for all Hq + Hkv heads
instead of once per head. Prefill puts thousands of tokens in the grid; decode (1-16 tokens)
fills few SMs, but moves at most 1.2 MB (Llama-3-70B, fp32) and is bound by latency either way.

q and k are taken as vLLM passes them: column slices of the fused qkv projection's output,
whose token stride is (Hq + 2 * Hkv) * D, so every stride is a kernel argument.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Params, Tensors
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn, warps_for_row

# Elements (both halves) of one head block: 32 heads of 128 at 8 warps, 16 fp32 values a thread.
HEAD_TILE = 4096


@triton.jit
def rotate_heads_neox(
    x_ptr,
    out_ptr,
    n_heads,
    half_d,
    stride_head,
    stride_dim,
    stride_out_head,
    stride_out_dim,
    cos,
    sin,
    d,
    d_mask,
    BLOCK_H: tl.constexpr,
):
    for h0 in range(0, n_heads, BLOCK_H):
        heads = h0 + tl.arange(0, BLOCK_H)
        mask = (heads < n_heads)[:, None] & d_mask[None, :]
        x1_ptrs = x_ptr + heads[:, None] * stride_head + d[None, :] * stride_dim
        x1 = tl.load(x1_ptrs, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(x1_ptrs + half_d * stride_dim, mask=mask, other=0.0).to(tl.float32)
        o1 = x1 * cos - x2 * sin
        o2 = x2 * cos + x1 * sin
        o1_ptrs = out_ptr + heads[:, None] * stride_out_head + d[None, :] * stride_out_dim
        out_ty = out_ptr.dtype.element_ty
        tl.store(o1_ptrs, o1.to(out_ty), mask=mask)
        tl.store(o1_ptrs + half_d * stride_out_dim, o2.to(out_ty), mask=mask)


@triton.jit
def rope_neox_kernel(
    q_ptr,
    k_ptr,
    q_out_ptr,
    k_out_ptr,
    cos_ptr,
    sin_ptr,
    pos_ptr,
    n_q_heads,
    n_kv_heads,
    half_d,
    stride_q_tok,
    stride_q_head,
    stride_q_dim,
    stride_k_tok,
    stride_k_head,
    stride_k_dim,
    stride_qo_tok,
    stride_qo_head,
    stride_qo_dim,
    stride_ko_tok,
    stride_ko_head,
    stride_ko_dim,
    stride_cos_pos,
    stride_cos_dim,
    stride_sin_pos,
    stride_sin_dim,
    BLOCK_HQ: tl.constexpr,
    BLOCK_HKV: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + tok)
    d = tl.arange(0, BLOCK_HALF)
    d_mask = d < half_d
    cos = tl.load(cos_ptr + pos * stride_cos_pos + d * stride_cos_dim, mask=d_mask, other=0.0)
    sin = tl.load(sin_ptr + pos * stride_sin_pos + d * stride_sin_dim, mask=d_mask, other=0.0)
    cos = cos.to(tl.float32)[None, :]
    sin = sin.to(tl.float32)[None, :]
    rotate_heads_neox(
        q_ptr + tok * stride_q_tok,
        q_out_ptr + tok * stride_qo_tok,
        n_q_heads,
        half_d,
        stride_q_head,
        stride_q_dim,
        stride_qo_head,
        stride_qo_dim,
        cos,
        sin,
        d,
        d_mask,
        BLOCK_H=BLOCK_HQ,
    )
    rotate_heads_neox(
        k_ptr + tok * stride_k_tok,
        k_out_ptr + tok * stride_ko_tok,
        n_kv_heads,
        half_d,
        stride_k_head,
        stride_k_dim,
        stride_ko_head,
        stride_ko_dim,
        cos,
        sin,
        d,
        d_mask,
        BLOCK_H=BLOCK_HKV,
    )


def _head_block(n_heads: int, block_half: int) -> int:
    return min(next_pow2(n_heads), max(1, HEAD_TILE // (2 * block_half)))


def _launch(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    q_out: torch.Tensor,
    k_out: torch.Tensor,
) -> LaunchConfig:
    tokens, n_q_heads, head_dim = q.shape
    if head_dim % 2:
        raise ValueError(f"NeoX RoPE rotates two halves; head_dim={head_dim} is odd")
    half_d = head_dim // 2
    block_half = next_pow2(half_d)
    block_hq = _head_block(n_q_heads, block_half)
    block_hkv = _head_block(k.shape[1], block_half)
    warps = warps_for_row(2 * block_half * max(block_hq, block_hkv))
    meta = {"BLOCK_HQ": block_hq, "BLOCK_HKV": block_hkv, "BLOCK_HALF": block_half}
    config = LaunchConfig(meta, num_warps=warps, num_stages=1)
    rope_neox_kernel[(tokens,)](
        q,
        k,
        q_out,
        k_out,
        cos,
        sin,
        positions,
        n_q_heads,
        k.shape[1],
        half_d,
        *q.stride(),
        *k.stride(),
        *q_out.stride(),
        *k_out.stride(),
        *cos.stride(),
        *sin.stride(),
        **meta,
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )
    return config


def _cos_sin_cache(
    max_positions: int, head_dim: int, base: float, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    if torch.device(device).type == "meta":
        # No angles to compute there, and the arithmetic imports Dynamo (inputs.randn).
        shape = (max_positions, len(range(0, head_dim, 2)))
        empty = torch.empty(shape, dtype=torch.float32, device=device)
        return empty, torch.empty_like(empty)
    # Angles in float64: pos * inv_freq reaches 1.3e5 rad, where an fp32 ulp is 0.016 rad.
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim
    inv_freq = base**-exponents
    pos = torch.arange(max_positions, dtype=torch.float64, device=device)
    angles = torch.outer(pos, inv_freq)
    return angles.cos().float(), angles.sin().float()


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    tokens, hq, hkv, d = (int(p[k]) for k in ("tokens", "heads_q", "heads_kv", "head_dim"))
    if p["fused_qkv"]:
        qkv = randn((tokens, (hq + 2 * hkv) * d), dtype, device, gen)
        q = qkv[:, : hq * d].view(tokens, hq, d)
        k = qkv[:, hq * d : (hq + hkv) * d].view(tokens, hkv, d)
    else:
        q = randn((tokens, hq, d), dtype, device, gen)
        k = randn((tokens, hkv, d), dtype, device, gen)
    max_positions = int(p["max_positions"])
    cos, sin = _cos_sin_cache(max_positions, d, float(p["base"]), device)
    # Random positions make the cos/sin load a real gather; a prefill's are contiguous.
    positions = torch.randint(
        0, max_positions, (tokens,), generator=gen, device=device, dtype=torch.int64
    )
    return {"q": q, "k": k, "cos_cache": cos, "sin_cache": sin, "positions": positions}


def _outputs(t: Tensors) -> dict[str, torch.Tensor]:
    return {"q_out": empty_like_dense(t["q"]), "k_out": empty_like_dense(t["k"])}


def _rotate_ref(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def _reference(t: Tensors) -> dict[str, torch.Tensor]:
    cos = t["cos_cache"][t["positions"]].unsqueeze(1)
    sin = t["sin_cache"][t["positions"]].unsqueeze(1)
    return {"q_out": _rotate_ref(t["q"], cos, sin), "k_out": _rotate_ref(t["k"], cos, sin)}


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    # Hugging Face Llama's apply_rotary_pos_emb, which casts cos/sin to the activation dtype.
    dtype = t["q"].dtype
    cos = t["cos_cache"][t["positions"]].to(dtype)
    sin = t["sin_cache"][t["positions"]].to(dtype)
    cos = torch.cat((cos, cos), dim=-1).unsqueeze(1)
    sin = torch.cat((sin, sin), dim=-1).unsqueeze(1)
    return {
        "q_out": t["q"] * cos + _rotate_half(t["q"]) * sin,
        "k_out": t["k"] * cos + _rotate_half(t["k"]) * sin,
    }


def _min_bytes(p: Params, elem: int) -> int:
    tokens, d = int(p["tokens"]), int(p["head_dim"])
    heads = int(p["heads_q"]) + int(p["heads_kv"])
    # q and k read and written, a float32 cos and sin row and an int64 position per token.
    return elem * 2 * tokens * heads * d + tokens * (2 * (d // 2) * 4 + 8)


# Llama-3-8B (32 q heads) and Llama-3-70B (64 q heads), both 8 kv heads of 128 and base 500000,
# decode to long prefill, over Llama-3.1's 131072-position context (a 64 MiB cos/sin cache).
# Llama-3.1's "llama3" frequency scaling is left out: it changes the cache, not the kernel.
_LLM_CASES = tuple(
    {
        "tokens": t,
        "heads_q": hq,
        "heads_kv": 8,
        "head_dim": 128,
        "max_positions": 131072,
        "base": 500000.0,
        "fused_qkv": True,
    }
    for hq in (32, 64)
    for t in (1, 16, 128, 2048, 16384)
)
# Tiny shapes for the CPU interpreter: one token with separate q and k, GQA slices of a fused qkv,
# a half head dim (24) no power of two divides, and 40 q heads of 128, which take two head blocks
# (the second partly masked) as Llama-3-70B's 64 do.
_SMOKE_CASES = (
    {
        "tokens": 1,
        "heads_q": 4,
        "heads_kv": 2,
        "head_dim": 16,
        "max_positions": 64,
        "base": 10000.0,
        "fused_qkv": False,
    },
    {
        "tokens": 5,
        "heads_q": 4,
        "heads_kv": 1,
        "head_dim": 32,
        "max_positions": 256,
        "base": 500000.0,
        "fused_qkv": True,
    },
    {
        "tokens": 3,
        "heads_q": 6,
        "heads_kv": 2,
        "head_dim": 48,
        "max_positions": 128,
        "base": 10000.0,
        "fused_qkv": True,
    },
    {
        "tokens": 2,
        "heads_q": 40,
        "heads_kv": 8,
        "head_dim": 128,
        "max_positions": 4096,
        "base": 500000.0,
        "fused_qkv": True,
    },
)

ROPE = KernelSpec(
    name="rope",
    summary="NeoX-style rotary position embedding of q and k from a cos/sin cache at positions.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: _outputs(t),
    launch=lambda t, o, p, cfg: _launch(
        t["q"], t["k"], t["cos_cache"], t["sin_cache"], t["positions"], o["q_out"], o["k_out"]
    ),
    reference=lambda t, p: _reference(t),
    baseline=Baseline("torch eager (gather cos/sin + rotate_half)", _baseline),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES},
    # per rotated pair 4 multiplies and 2 adds: 3 per element of q and k
    flops=lambda p: (
        3 * int(p["tokens"]) * (int(p["heads_q"]) + int(p["heads_kv"])) * int(p["head_dim"])
    ),
    min_bytes=_min_bytes,
)
