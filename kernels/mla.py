"""Multi-head latent attention (MLA) decode, DeepSeek-V2/V3 style, over a paged latent cache.

MLA caches one compressed row per token: a latent ``c_kv`` (kv_lora_rank, 512 in
DeepSeek-V3) and a decoupled RoPE key ``k_pe`` (qk_rope_head_dim, 64), stored side by side
(576 values a token, FlashMLA's layout). At decode the key and value up-projections are
absorbed into the query and the output projection, so every head attends over the shared
latent directly: score = q_nope' . c_kv + q_pe . k_pe, output = softmax @ c_kv (512 wide,
projected to v_head_dim afterwards, outside this kernel). All 128 heads share one cache row:
it is GQA with a group of 128, so the query heads are the rows of the MMA and each cache row
is read once per block of heads.

Split-K as in decode_attention.py (whose combine kernel finishes it): a program streams one
split of one sequence's keys for ``BLOCK_R`` (query, head) rows.
"""

from __future__ import annotations

import math

import torch
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
from kernelwatch.kernels.attention import LOG2_E
from kernelwatch.kernels.decode_attention import (
    block_table_bytes,
    cache_rows,
    causal_attention_rows,
    combine_splits,
    gather_pages,
    online_softmax_step,
    paged_cache,
    partials,
    plan_splits,
    seq_lens_of,
    store_split,
    visible_pairs,
)
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn
from kernelwatch.kernels.models import DECODE_TOKENS, DEEPSEEK_V3


@triton.jit
def mla_decode_split_kernel(
    q_nope_ptr,
    q_pe_ptr,
    kv_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    part_o_ptr,
    part_lse_ptr,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_pb,
    stride_ps,
    stride_ph,
    stride_kvp,
    stride_kvt,
    stride_btb,
    stride_ob,
    stride_os,
    stride_oh,
    stride_ok,
    heads,
    seq_q,
    split_keys,
    qk_scale,
    PAGE_SIZE: tl.constexpr,
    LATENT: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    row_blocks = (seq_q * heads + BLOCK_R - 1) // BLOCK_R
    batch = tl.program_id(0) // row_blocks
    rows = (tl.program_id(0) % row_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    split = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + batch)
    start = split * split_keys
    end = tl.minimum(start + split_keys, seq_len)

    query = rows // heads
    head = rows % heads
    row_mask = rows < seq_q * heads
    offs_c = tl.arange(0, BLOCK_C)
    offs_p = tl.arange(0, BLOCK_P)
    c_mask = offs_c < LATENT
    p_mask = offs_p < ROPE
    b64 = batch.to(tl.int64)
    q_rows = b64 * stride_qb + query * stride_qs + head * stride_qh
    q_nope = tl.load(
        q_nope_ptr + q_rows[:, None] + offs_c[None, :],
        mask=row_mask[:, None] & c_mask[None, :],
        other=0.0,
    )
    pe_rows = b64 * stride_pb + query * stride_ps + head * stride_ph
    q_pe = tl.load(
        q_pe_ptr + pe_rows[:, None] + offs_p[None, :],
        mask=row_mask[:, None] & p_mask[None, :],
        other=0.0,
    )
    frontier = seq_len - seq_q + query

    m_i = tl.full((BLOCK_R,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_R,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_C), dtype=tl.float32)
    table = block_table_ptr + b64 * stride_btb
    offs_n = tl.arange(0, BLOCK_N)
    for first in range(start, end, BLOCK_N):
        keys = first + offs_n
        k_mask = keys < end
        kv_rows = cache_rows(table, keys, k_mask, stride_kvp, stride_kvt, PAGE_SIZE)
        latent = tl.load(
            kv_cache_ptr + kv_rows[:, None] + offs_c[None, :],
            mask=k_mask[:, None] & c_mask[None, :],
            other=0.0,
        )
        k_pe = tl.load(
            kv_cache_ptr + kv_rows[:, None] + LATENT + offs_p[None, :],
            mask=k_mask[:, None] & p_mask[None, :],
            other=0.0,
        )
        s = tl.dot(q_nope, tl.trans(latent), input_precision="tf32")
        s = tl.dot(q_pe, tl.trans(k_pe), s, input_precision="tf32") * qk_scale
        visible = k_mask[None, :] & (keys[None, :] <= frontier[:, None])
        s = tl.where(visible, s, float("-inf"))
        # The latent is the value too: one load serves both matmuls.
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, s, latent)

    part_rows = b64 * stride_ob + query * stride_os + head * stride_oh + split * stride_ok
    store_split(
        acc,
        l_i,
        m_i,
        part_o_ptr + part_rows[:, None] * BLOCK_C + offs_c[None, :],
        part_lse_ptr + part_rows,
        row_mask[:, None] & c_mask[None, :],
        row_mask,
    )


# vLLM's Triton MLA decode runs 16 heads a program over 16-32 keys at latent 512; 32 heads a
# program halve the cache reads per head, and take wgmma's 64-row tiles on sm_90a. At 64
# heads the 64 x 512 fp32 accumulator spilled (104-728 B on sm_90a, 8 warps).
MLA_CONFIGS = tuple(
    LaunchConfig({"BLOCK_R": br, "BLOCK_N": bn, "SPLIT_KEYS": 512}, w, s)
    for br, bn, w, s in ((16, 32, 4, 2), (32, 16, 4, 2), (32, 32, 8, 2))
)
MLA_PINNED = LaunchConfig({"BLOCK_R": 16, "BLOCK_N": 16, "SPLIT_KEYS": 32}, 4, 1)
_DEFAULT = LaunchConfig({"BLOCK_R": 16, "BLOCK_N": 32}, 4, 2)


def mla_decode(
    q_nope: torch.Tensor,
    q_pe: torch.Tensor,
    kv_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    out: torch.Tensor,
    softmax_scale: float,
    config: LaunchConfig | None,
) -> LaunchConfig:
    """Absorbed MLA decode: ``q_nope`` (batch, seq_q, heads, latent) and ``q_pe`` (..., rope)
    over ``kv_cache`` (pages, page_size, latent + rope); ``out`` is (batch, seq_q, heads,
    latent)."""
    batch, seq_q, heads, latent = q_nope.shape
    rope = q_pe.shape[-1]
    page_size = kv_cache.shape[1]
    if kv_cache.shape[2] != latent + rope or out.shape != q_nope.shape:
        raise ValueError(
            f"MLA shapes do not match: q_nope {tuple(q_nope.shape)} q_pe {tuple(q_pe.shape)} "
            f"kv_cache {tuple(kv_cache.shape)} out {tuple(out.shape)}"
        )
    if q_nope.stride(-1) != 1 or q_pe.stride(-1) != 1 or kv_cache.stride(-1) != 1:
        raise ValueError("MLA decode reads rows with unit stride: make the last dims contiguous")
    chosen = config or _DEFAULT
    block_r, block_n = int(chosen.meta["BLOCK_R"]), int(chosen.meta["BLOCK_N"])
    row_blocks = triton.cdiv(seq_q * heads, block_r)
    keys, splits = plan_splits(
        batch * row_blocks, block_table.shape[1] * page_size, block_n, config
    )
    block_c = next_pow2(latent)
    part_o, part_lse = partials(batch, seq_q, heads, splits, block_c, q_nope.device)
    mla_decode_split_kernel[(batch * row_blocks, splits)](
        q_nope,
        q_pe,
        kv_cache,
        block_table,
        seq_lens,
        part_o,
        part_lse,
        *q_nope.stride()[:3],
        *q_pe.stride()[:3],
        kv_cache.stride(0),
        kv_cache.stride(1),
        block_table.stride(0),
        *part_lse.stride(),
        heads,
        seq_q,
        keys,
        softmax_scale * LOG2_E,
        PAGE_SIZE=page_size,
        LATENT=latent,
        ROPE=rope,
        BLOCK_C=block_c,
        BLOCK_P=next_pow2(rope),
        BLOCK_R=block_r,
        BLOCK_N=block_n,
        num_warps=chosen.num_warps,
        num_stages=chosen.num_stages,
    )
    combine_splits(part_o, part_lse, out)
    meta = {"BLOCK_R": block_r, "BLOCK_N": block_n, "SPLIT_KEYS": keys}
    return LaunchConfig(meta, chosen.num_warps, chosen.num_stages)


def _softmax_scale(p: Params) -> float:
    # DeepSeek scales by the full query-key head dim (qk_nope + qk_rope), not the latent's.
    return 1 / math.sqrt(int(p["qk_head_dim"]))


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    lens = seq_lens_of(p)
    latent, rope = int(p["kv_lora_rank"]), int(p["qk_rope_head_dim"])
    (kv_cache,), table = paged_cache(
        lens, int(p["page_size"]), (latent + rope,), dtype, device, gen, caches=1
    )
    rows = (len(lens), int(p["seq_q"]), int(p["heads"]))
    return {
        "q_nope": randn((*rows, latent), dtype, device, gen),
        "q_pe": randn((*rows, rope), dtype, device, gen),
        "kv_cache": kv_cache,
        "block_table": table,
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
    }


def _reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    q = torch.cat([t["q_nope"], t["q_pe"]], dim=-1)
    latent, heads = t["q_nope"].shape[-1], q.shape[2]
    out = torch.empty_like(t["q_nope"])
    for b, n in enumerate(seq_lens_of(p)):
        rows = gather_pages(t["kv_cache"], t["block_table"], b, n)[:, None, :]
        k = rows.expand(n, heads, rows.shape[-1])
        out[b] = causal_attention_rows(q[b], k, k[..., :latent], _softmax_scale(p))
    return {"out": out}


def _torch_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    """The same math in torch over the gathered pages: padded (batch, capacity, 576) rows, a
    length-and-causal mask, two batched matmuls and a softmax."""
    q = torch.cat([t["q_nope"], t["q_pe"]], dim=-1)
    batch, seq_q, _, latent = t["q_nope"].shape
    rows = t["kv_cache"][t["block_table"].long()].reshape(batch, -1, q.shape[-1])
    s = torch.einsum("bshd,bkd->bshk", q, rows) * _softmax_scale(p)
    keys = torch.arange(rows.shape[1], device=q.device)
    frontier = t["seq_lens"][:, None] - seq_q + torch.arange(seq_q, device=q.device)[None, :]
    s = s.masked_fill(~(keys <= frontier[:, :, None])[:, :, None, :], float("-inf"))
    return {"out": torch.einsum("bshk,bkd->bshd", torch.softmax(s, -1), rows[..., :latent])}


def _flops(p: Params) -> int:
    latent, rope = int(p["kv_lora_rank"]), int(p["qk_rope_head_dim"])
    # q . [c_kv, k_pe] and p . c_kv per head and visible (query, key) pair
    return 2 * (2 * latent + rope) * int(p["heads"]) * visible_pairs(p)


def _min_bytes(p: Params, elem: int) -> int:
    latent, rope = int(p["kv_lora_rank"]), int(p["qk_rope_head_dim"])
    rows = int(p["batch"]) * int(p["seq_q"]) * int(p["heads"])
    cache_rows = sum(seq_lens_of(p))
    # q_nope, q_pe and out; each cache row once; the block table
    return elem * (rows * (2 * latent + rope) + cache_rows * (latent + rope)) + block_table_bytes(p)


_MLA_SHAPE = {
    "heads": DEEPSEEK_V3["num_attention_heads"],
    "kv_lora_rank": DEEPSEEK_V3["kv_lora_rank"],
    "qk_rope_head_dim": DEEPSEEK_V3["qk_rope_head_dim"],
    "qk_head_dim": DEEPSEEK_V3["qk_nope_head_dim"] + DEEPSEEK_V3["qk_rope_head_dim"],
}
# DeepSeek-V3 (num_attention_heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim) at
# FlashMLA's page of 64 and vLLM's 16; one query, and two (its multi-token-prediction draft);
# one long sequence and batches of 32 and 64.
_DECODE_CASES = tuple(
    {"batch": batch, "seq_q": seq_q, **_MLA_SHAPE, "page_size": page, "seq_k": seq_k,
     "model": DEEPSEEK_V3.name}
    for page in (64, 16)
    for seq_q in (1, 2)
    for batch, seq_k in ((1, 32768), (DECODE_TOKENS[2], 4096), (DECODE_TOKENS[3], 8192))
)  # fmt: skip
# Interpreter shapes at 16 rows, 16-key blocks and 32-key splits: DeepSeek's 512 + 64 over
# two sequences of 37 and 18 keys; a 2-query step whose 48 rows (24 heads) leave the last row
# block partly empty, on 64-key pages; and one head with a latent and rope no block divides.
_SMOKE_CASES = (
    {"batch": 2, "seq_q": 1, "heads": 16, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
     "qk_head_dim": 192, "page_size": 16, "seq_k": 37},
    {"batch": 1, "seq_q": 2, "heads": 24, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
     "qk_head_dim": 192, "page_size": 64, "seq_k": 70},
    {"batch": 1, "seq_q": 1, "heads": 1, "kv_lora_rank": 48, "qk_rope_head_dim": 24,
     "qk_head_dim": 40, "page_size": 16, "seq_k": 5},
)  # fmt: skip

MLA_DECODE = KernelSpec(
    name="mla_decode",
    summary="DeepSeek MLA decode with absorbed projections over a paged 512+64 latent cache.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": empty_like_dense(t["q_nope"])},
    launch=lambda t, o, p, cfg: mla_decode(
        t["q_nope"],
        t["q_pe"],
        t["kv_cache"],
        t["block_table"],
        t["seq_lens"],
        o["out"],
        _softmax_scale(p),
        cfg,
    ),
    reference=_reference,
    baseline=Baseline("torch einsum / softmax over the gathered latent pages", _torch_baseline),
    # The model family first: a build without --workload compiles a spec's first workload.
    workloads={"decode": _DECODE_CASES, "smoke": _SMOKE_CASES},
    flops=_flops,
    min_bytes=_min_bytes,
    tolerance={**DEFAULT_TOLERANCE, "fp32": 5e-3},
    configs=MLA_CONFIGS,
    pinned_config=MLA_PINNED,
)
