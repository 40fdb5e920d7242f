"""Decode attention over a paged KV cache with split-K (flash-decoding), GQA.

At decode a sequence brings one query per head (or a few, when a speculative draft is
verified), so one program per (sequence, head) leaves most SMs idle on a long cache.
Flash-decoding splits the KV length: each program streams one split of one sequence's keys
for all the query heads sharing a KV head (GQA's group, times the queries, are the rows of
its MMA), and writes the split's normalised output and log-sum-exp; a second kernel combines
the splits per query row. Keys live in fixed-size pages addressed through a per-sequence
block table, as vLLM and FlashInfer keep them; the sequences of a batch have different
lengths, and a split past a sequence's end writes an empty partial.

The split length is chosen per launch so that (sequences x KV heads x splits) covers the
GPU twice over; it is a runtime argument, so one compiled kernel serves every split count.
Scores are kept in base 2 (``log2(e)`` folded into the scale), as in attention.py.
"""

from __future__ import annotations

import math
from dataclasses import replace

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
from kernelwatch.kernels.inputs import empty_like_dense, next_pow2, randn
from kernelwatch.kernels.models import DECODE_TOKENS, DENSE, MISTRAL_7B

#: Programs a launch aims for: two waves on a 132-SM H100/H200 (B200 has 148).
TARGET_PROGRAMS = 264


@triton.jit
def online_softmax_step(acc, l_i, m_i, s, v):
    """Fold one block of base-2 scores ``s`` (masked keys at -inf) and its values ``v`` into
    the running ``(acc, l_i, m_i)``. A row that has seen no key yet keeps m_i at -inf, so
    the exponent base falls back to 0 rather than producing -inf - -inf."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    base = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.math.exp2(m_i - base)
    p = tl.math.exp2(s - base[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision="tf32")
    return acc, l_i, m_new


@triton.jit
def cache_rows(table, keys, k_mask, stride_page, stride_slot, PAGE_SIZE: tl.constexpr):
    """Offsets of the cache rows that hold ``keys`` of one sequence, through its block-table
    row ``table`` (masked keys read page 0, and are masked again by the caller's loads)."""
    page = tl.load(table + keys // PAGE_SIZE, mask=k_mask, other=0).to(tl.int64)
    return page * stride_page + (keys % PAGE_SIZE) * stride_slot


@triton.jit
def store_split(acc, l_i, m_i, o_ptrs, lse_ptrs, o_mask, row_mask):
    """Write a split's normalised output and base-2 log-sum-exp; a row that saw no key in
    this split gets zeros and -inf, which the combine weighs at zero."""
    seen = l_i > 0
    l_safe = tl.where(seen, l_i, 1.0)
    tl.store(o_ptrs, acc / l_safe[:, None], mask=o_mask)
    tl.store(lse_ptrs, tl.where(seen, m_i + tl.math.log2(l_safe), float("-inf")), mask=row_mask)


@triton.jit
def paged_decode_split_kernel(
    q_ptr,
    k_cache_ptr,
    v_cache_ptr,
    block_table_ptr,
    seq_lens_ptr,
    part_o_ptr,
    part_lse_ptr,
    stride_qb,
    stride_qs,
    stride_qh,
    stride_qd,
    stride_cp,
    stride_ct,
    stride_ch,
    stride_cd,
    stride_btb,
    stride_pb,
    stride_ps,
    stride_ph,
    stride_pk,
    heads_kv,
    group,
    seq_q,
    split_keys,
    qk_scale,
    PAGE_SIZE: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_N: tl.constexpr,
    WINDOW: tl.constexpr,
):
    batch = tl.program_id(0) // heads_kv
    head_kv = tl.program_id(0) % heads_kv
    split = tl.program_id(1)
    seq_len = tl.load(seq_lens_ptr + batch)
    start = split * split_keys
    end = tl.minimum(start + split_keys, seq_len)
    if WINDOW > 0:
        # Keys before the first query's window are seen by no query: a split wholly before
        # it writes an empty partial without reading a page.
        start = tl.maximum(start, seq_len - seq_q + 1 - WINDOW)

    # Row r is query r // group of query head head_kv * group + r % group.
    rows = tl.arange(0, BLOCK_R)
    query = rows // group
    head = head_kv * group + rows % group
    row_mask = rows < group * seq_q
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    q_mask = row_mask[:, None] & d_mask[None, :]
    q_rows = batch.to(tl.int64) * stride_qb + query * stride_qs + head * stride_qh
    q = tl.load(q_ptr + q_rows[:, None] + offs_d[None, :] * stride_qd, mask=q_mask, other=0.0)
    # Query i of seq_q sees keys up to seq_len - seq_q + i (bottom-right causal).
    frontier = seq_len - seq_q + query

    m_i = tl.full((BLOCK_R,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_R,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_R, BLOCK_D), dtype=tl.float32)
    table = block_table_ptr + batch.to(tl.int64) * stride_btb
    offs_n = tl.arange(0, BLOCK_N)
    for first in range(start, end, BLOCK_N):
        keys = first + offs_n
        k_mask = keys < end
        rows_kv = cache_rows(table, keys, k_mask, stride_cp, stride_ct, PAGE_SIZE)
        offs = rows_kv[:, None] + head_kv * stride_ch + offs_d[None, :] * stride_cd
        kv_mask = k_mask[:, None] & d_mask[None, :]
        k = tl.load(k_cache_ptr + offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k), input_precision="tf32") * qk_scale
        visible = k_mask[None, :] & (keys[None, :] <= frontier[:, None])
        if WINDOW > 0:  # query i sees its last WINDOW keys, itself included
            visible = visible & (keys[None, :] > frontier[:, None] - WINDOW)
        s = tl.where(visible, s, float("-inf"))
        v = tl.load(v_cache_ptr + offs, mask=kv_mask, other=0.0)
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, s, v)

    part_rows = batch.to(tl.int64) * stride_pb + query * stride_ps + head * stride_ph
    part_rows += split * stride_pk
    store_split(
        acc,
        l_i,
        m_i,
        part_o_ptr + part_rows[:, None] * BLOCK_D + offs_d[None, :],
        part_lse_ptr + part_rows,
        q_mask,
        row_mask,
    )


@triton.jit
def combine_splits_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    heads,
    seq_q,
    splits,
    stride_ob,
    stride_os,
    stride_oh,
    stride_od,
    DIM: tl.constexpr,
    PART_D: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    """One query row: out = sum_s 2^(lse_s - max) o_s / sum_s 2^(lse_s - max). The splits'
    rows are added one at a time (a 64-split, 512-wide MLA row would not fit in registers),
    in split order."""
    row = tl.program_id(0)
    head = row % heads
    query = (row // heads) % seq_q
    batch = row // (heads * seq_q)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < DIM
    base = row.to(tl.int64) * splits
    lse = tl.load(part_lse_ptr + base + offs_s, mask=offs_s < splits, other=float("-inf"))
    top = tl.max(lse, 0)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for s in range(0, splits):
        weight = tl.math.exp2(tl.load(part_lse_ptr + base + s) - top)
        acc += weight * tl.load(part_o_ptr + (base + s) * PART_D + offs_d, mask=d_mask, other=0.0)
    out = acc / tl.sum(tl.math.exp2(lse - top), 0)
    out_row = batch.to(tl.int64) * stride_ob + query * stride_os + head * stride_oh
    tl.store(out_ptr + out_row + offs_d * stride_od, out.to(out_ptr.dtype.element_ty), mask=d_mask)


def plan_splits(
    programs: int, capacity: int, block_n: int, config: LaunchConfig | None
) -> tuple[int, int]:
    """(keys per split, splits) over ``capacity`` keys: the pinned config's split length,
    else the longest that still gives ``programs`` (programs per split) x splits at least
    :data:`TARGET_PROGRAMS`, in whole key blocks."""
    if config is not None:
        keys = int(config.meta["SPLIT_KEYS"])
    else:
        splits = max(1, min(triton.cdiv(TARGET_PROGRAMS, programs), triton.cdiv(capacity, block_n)))
        keys = triton.cdiv(triton.cdiv(capacity, splits), block_n) * block_n
    return keys, triton.cdiv(capacity, keys)


def partials(
    batch: int, seq_q: int, heads: int, splits: int, dim: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 buffers for each split's output rows (``dim`` wide) and log-sum-exp."""
    o = torch.empty((batch, seq_q, heads, splits, dim), dtype=torch.float32, device=device)
    lse = torch.empty((batch, seq_q, heads, splits), dtype=torch.float32, device=device)
    return o, lse


def combine_splits(part_o: torch.Tensor, part_lse: torch.Tensor, out: torch.Tensor) -> None:
    """Combine the splits of every query row of ``out`` (batch, seq_q, heads, dim)."""
    batch, seq_q, heads, splits, part_d = part_o.shape
    combine_splits_kernel[(batch * seq_q * heads,)](
        part_o,
        part_lse,
        out,
        heads,
        seq_q,
        splits,
        *out.stride(),
        DIM=out.shape[-1],
        PART_D=part_d,
        BLOCK_S=next_pow2(splits),
        BLOCK_D=next_pow2(out.shape[-1]),
        num_warps=4,
    )


# Tiles the decode kernels of vLLM and FlashInfer use at head_dim 128: 16 query rows (GQA
# groups of 4-8, times up to 4 speculative queries, padded to the MMA's 16) and 32-128 keys.
# The split length does not change the compiled code.
DECODE_CONFIGS = tuple(
    LaunchConfig({"BLOCK_N": bn, "SPLIT_KEYS": 512}, w, s)
    for bn, w, s in ((32, 4, 2), (64, 4, 2), (128, 4, 2))
)
# Small enough for the CPU interpreter, and splits short enough that every smoke case with
# more than 32 keys has several, one of them partly past the shorter sequences' ends.
DECODE_PINNED = LaunchConfig({"BLOCK_N": 16, "SPLIT_KEYS": 32}, 4, 1)
_DEFAULT = LaunchConfig({"BLOCK_N": 64}, 4, 2)


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    out: torch.Tensor,
    config: LaunchConfig | None,
    window: int = 0,
) -> LaunchConfig:
    """Attention of ``q`` (batch, seq_q, heads_q, dim) over each sequence's pages of the
    caches (pages, page_size, heads_kv, dim), into ``out`` (like ``q``); with ``window``,
    each query over its last ``window`` keys only (0: all)."""
    batch, seq_q, heads_q, dim = q.shape
    page_size, heads_kv = k_cache.shape[1], k_cache.shape[2]
    if heads_q % heads_kv or k_cache.shape != v_cache.shape or out.shape != q.shape:
        raise ValueError(
            f"paged attention shapes do not match: q {tuple(q.shape)} k_cache "
            f"{tuple(k_cache.shape)} v_cache {tuple(v_cache.shape)} out {tuple(out.shape)}"
        )
    if k_cache.stride() != v_cache.stride():
        raise ValueError("the K and V caches must share a layout (strides), as one allocation")
    group = heads_q // heads_kv
    chosen = config or _DEFAULT
    block_n = int(chosen.meta["BLOCK_N"])
    keys, splits = plan_splits(batch * heads_kv, block_table.shape[1] * page_size, block_n, config)
    block_d = next_pow2(dim)
    part_o, part_lse = partials(batch, seq_q, heads_q, splits, block_d, q.device)
    paged_decode_split_kernel[(batch * heads_kv, splits)](
        q,
        k_cache,
        v_cache,
        block_table,
        seq_lens,
        part_o,
        part_lse,
        *q.stride(),
        *k_cache.stride(),
        block_table.stride(0),
        *part_lse.stride()[:4],
        heads_kv,
        group,
        seq_q,
        keys,
        LOG2_E / math.sqrt(dim),
        PAGE_SIZE=page_size,
        HEAD_DIM=dim,
        BLOCK_D=block_d,
        BLOCK_R=max(16, next_pow2(group * seq_q)),
        BLOCK_N=block_n,
        WINDOW=window,
        num_warps=chosen.num_warps,
        num_stages=chosen.num_stages,
    )
    combine_splits(part_o, part_lse, out)
    return LaunchConfig(
        {"BLOCK_N": block_n, "SPLIT_KEYS": keys}, chosen.num_warps, chosen.num_stages
    )


def seq_lens_of(p: Params) -> list[int]:
    """The batch's sequence lengths: ``seq_k`` down to about ``seq_k / batch`` in even steps,
    never fewer than the queries. Deterministic, so the FLOP and byte models know them."""
    batch, seq_k, seq_q = int(p["batch"]), int(p["seq_k"]), int(p["seq_q"])
    return [max(seq_q, seq_k * (batch - i) // batch) for i in range(batch)]


def paged_cache(
    seq_lens: list[int],
    page_size: int,
    row_shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
    caches: int,
) -> tuple[list[torch.Tensor], torch.Tensor]:
    """``caches`` random page pools (pages, page_size, *row_shape) and the block table that
    maps each sequence's positions onto pages in a random order. Slots past a sequence's end
    and one spare page, which every unused block-table entry points at, hold NaN: a kernel
    that reads past a sequence or through a stale entry computes NaN."""
    needed = [math.ceil(n / page_size) for n in seq_lens]
    pages = sum(needed) + 1
    order = torch.randperm(pages, generator=gen, device=device).to(torch.int32)
    spare = order[-1:]  # a one-element tensor, not a scalar: no host read on the meta device
    table = spare.expand(len(seq_lens), max(needed)).clone()
    taken = 0
    pools = [randn((pages, page_size, *row_shape), dtype, device, gen) for _ in range(caches)]
    for b, (n, count) in enumerate(zip(seq_lens, needed, strict=True)):
        table[b, :count] = order[taken : taken + count]
        taken += count
        for pool in pools:
            pool[table[b, count - 1 : count].long(), n - (count - 1) * page_size :] = float("nan")
    for pool in pools:
        pool[spare.long()] = float("nan")
    return pools, table


def gather_pages(cache: torch.Tensor, table: torch.Tensor, b: int, n: int) -> torch.Tensor:
    """Sequence ``b``'s first ``n`` cache rows, in order: (n, *row_shape)."""
    page_size = cache.shape[1]
    rows = cache[table[b, : math.ceil(n / page_size)].long()]
    return rows.reshape(-1, *cache.shape[2:])[:n]


def causal_attention_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, window: int = 0
):
    """Exact attention of ``q`` (seq_q, heads, d) over ``k`` (n, heads, d) and ``v`` (n,
    heads, dv), query i seeing keys up to n - seq_q + i (with ``window``, its last
    ``window`` of them)."""
    seq_q, n = q.shape[0], k.shape[0]
    s = torch.einsum("qhd,khd->hqk", q, k) * scale
    keys = torch.arange(n, device=q.device)[None, :]
    frontier = n - seq_q + torch.arange(seq_q, device=q.device)[:, None]
    visible = keys <= frontier
    if window:
        visible &= keys > frontier - window
    s = s.masked_fill(~visible, float("-inf"))
    return torch.einsum("hqk,khd->qhd", torch.softmax(s, dim=-1), v)


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    lens = seq_lens_of(p)
    heads_kv, dim = int(p["heads_kv"]), int(p["head_dim"])
    (k_cache, v_cache), table = paged_cache(
        lens, int(p["page_size"]), (heads_kv, dim), dtype, device, gen, caches=2
    )
    q = randn((len(lens), int(p["seq_q"]), int(p["heads_q"]), dim), dtype, device, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32, device=device)
    return {
        "q": q,
        "k_cache": k_cache,
        "v_cache": v_cache,
        "block_table": table,
        "seq_lens": seq_lens,
    }


def _reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    q, table = t["q"], t["block_table"]
    group = q.shape[2] // t["k_cache"].shape[2]
    out = torch.empty_like(q)
    for b, n in enumerate(seq_lens_of(p)):
        k = gather_pages(t["k_cache"], table, b, n).repeat_interleave(group, dim=1)
        v = gather_pages(t["v_cache"], table, b, n).repeat_interleave(group, dim=1)
        out[b] = causal_attention_rows(q[b], k, v, 1 / math.sqrt(q.shape[-1]), _window(p))
    return {"out": out}


def _sdpa_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    """What serving without a paged kernel does: gather every sequence's pages into a padded
    (batch, heads_kv, capacity, dim) tensor and run SDPA with a length-and-causal mask."""
    q, table, lens = t["q"], t["block_table"], t["seq_lens"]
    batch, seq_q, heads_q = q.shape[:3]

    def padded(cache: torch.Tensor) -> torch.Tensor:
        rows = cache[table.long()].reshape(batch, -1, *cache.shape[2:])
        return rows.transpose(1, 2)

    k, v = padded(t["k_cache"]), padded(t["v_cache"])
    keys = torch.arange(k.shape[2], device=q.device)
    frontier = lens[:, None] - seq_q + torch.arange(seq_q, device=q.device)[None, :]
    mask = keys[None, None, :] <= frontier[:, :, None]
    if _window(p):
        mask &= keys[None, None, :] > frontier[:, :, None] - _window(p)
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k, v, attn_mask=mask[:, None], enable_gqa=heads_q != k.shape[1]
    )
    return {"out": out.transpose(1, 2)}


def _window(p: Params) -> int:
    return int(p.get("window", 0))


def visible_pairs(p: Params) -> int:
    """(query, key) pairs the case's queries attend over, summed over its sequences."""
    seq_q, window = int(p["seq_q"]), _window(p)
    if window:  # query i sees min(n - seq_q + i + 1, window) keys
        return sum(min(n - seq_q + i + 1, window) for n in seq_lens_of(p) for i in range(seq_q))
    return sum(seq_q * (n - seq_q) + seq_q * (seq_q + 1) // 2 for n in seq_lens_of(p))


def _read_keys(p: Params, n: int) -> int:
    """Keys of a sequence of ``n`` some query sees: all, or the first query's window on."""
    window = _window(p)
    return min(n, int(p["seq_q"]) - 1 + window) if window else n


def block_table_bytes(p: Params) -> int:
    """The int32 page indices of the case's sequences."""
    return 4 * sum(math.ceil(n / int(p["page_size"])) for n in seq_lens_of(p))


def _min_bytes(p: Params, elem: int) -> int:
    q_elems = int(p["batch"]) * int(p["seq_q"]) * int(p["heads_q"]) * int(p["head_dim"])
    kv_elems = sum(_read_keys(p, n) for n in seq_lens_of(p)) * int(p["heads_kv"])
    kv_elems *= int(p["head_dim"])
    # q and out, k and v, and the block table
    return elem * (2 * q_elems + 2 * kv_elems) + block_table_bytes(p)


# The dense models' attention (models.py) at vLLM's default page of 16 and FlashInfer's 64;
# one query per sequence, and 4 (a speculative draft being verified); one long sequence, and
# batches of 32 and 64 sequences of lengths falling from seq_k to seq_k / batch.
_DECODE_CASES = tuple(
    {
        "batch": batch,
        "seq_q": seq_q,
        "heads_q": model["num_attention_heads"],
        "heads_kv": model["num_key_value_heads"],
        "head_dim": model["head_dim"],
        "page_size": page,
        "seq_k": seq_k,
        "model": model.name,
    }
    for model in DENSE
    for page in (16, 64)
    for seq_q in (1, 4)
    for batch, seq_k in ((1, 32768), (DECODE_TOKENS[2], 4096), (DECODE_TOKENS[3], 8192))
)
# Interpreter shapes at the pinned 16-key blocks and 32-key splits: GQA groups of 2 over
# three sequences of 47, 31 and 15 keys (partial last pages, a split past the short ones'
# ends); a speculative 4-query step over 64-key pages with a head_dim no block divides; and
# one head over 5 keys, less than a page.
_SMOKE_CASES = (
    {"batch": 3, "seq_q": 1, "heads_q": 4, "heads_kv": 2, "head_dim": 16, "page_size": 16,
     "seq_k": 47},
    {"batch": 2, "seq_q": 4, "heads_q": 2, "heads_kv": 1, "head_dim": 24, "page_size": 64,
     "seq_k": 70},
    {"batch": 1, "seq_q": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 32, "page_size": 16,
     "seq_k": 5},
)  # fmt: skip

PAGED_DECODE_ATTENTION = KernelSpec(
    name="paged_decode_attention",
    summary="Decode attention over a paged KV cache, GQA, split-K with a combine kernel.",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": empty_like_dense(t["q"])},
    launch=lambda t, o, p, cfg: paged_decode_attention(
        t["q"], t["k_cache"], t["v_cache"], t["block_table"], t["seq_lens"], o["out"], cfg
    ),
    reference=_reference,
    baseline=Baseline(
        "torch gather of the pages + scaled_dot_product_attention with a length mask",
        _sdpa_baseline,
    ),
    # The model family first: a build without --workload compiles a spec's first workload.
    workloads={"decode": _DECODE_CASES, "smoke": _SMOKE_CASES},
    flops=lambda p: 4 * int(p["heads_q"]) * int(p["head_dim"]) * visible_pairs(p),
    min_bytes=_min_bytes,
    # Both matmuls run fp32 operands through TF32, as attention.py does.
    tolerance={**DEFAULT_TOLERANCE, "fp32": 5e-3},
    configs=DECODE_CONFIGS,
    pinned_config=DECODE_PINNED,
)

# Mistral 7B's local layers (every layer, a 4,096-key window) at decode, paged at vLLM's 16:
# one long sequence, and batches of 32 and 64 sequences, one query and a 4-query draft.
_SLIDING_DECODE_CASES = tuple(
    {
        "batch": batch,
        "seq_q": seq_q,
        "heads_q": MISTRAL_7B["num_attention_heads"],
        "heads_kv": MISTRAL_7B["num_key_value_heads"],
        "head_dim": MISTRAL_7B["head_dim"],
        "page_size": 16,
        "seq_k": seq_k,
        "window": MISTRAL_7B["sliding_window"],
        "model": MISTRAL_7B.name,
    }
    for seq_q in (1, 4)
    for batch, seq_k in ((1, 32768), (DECODE_TOKENS[2], 8192), (DECODE_TOKENS[3], 16384))
)
# Interpreter shapes at the pinned 16-key blocks and 32-key splits: a window no page or block
# divides, so splits wholly before it are skipped and one is cut; a window narrower than the
# 4-query draft; and a window wider than the sequence (plain causal decode).
_SLIDING_DECODE_SMOKE = (
    {"batch": 3, "seq_q": 1, "heads_q": 4, "heads_kv": 2, "head_dim": 16, "page_size": 16,
     "seq_k": 47, "window": 20},
    {"batch": 2, "seq_q": 4, "heads_q": 2, "heads_kv": 1, "head_dim": 24, "page_size": 64,
     "seq_k": 70, "window": 3},
    {"batch": 1, "seq_q": 1, "heads_q": 1, "heads_kv": 1, "head_dim": 32, "page_size": 16,
     "seq_k": 5, "window": 64},
)  # fmt: skip

# The paged decode kernel with the window: the same inputs, outputs, tolerance and tiles.
SLIDING_WINDOW_DECODE_ATTENTION = replace(
    PAGED_DECODE_ATTENTION,
    name="sliding_window_decode_attention",
    family=None,  # from its own name, as an undeclared family is
    summary="Decode attention over a paged KV cache whose queries see only their last "
    "`window` keys (Mistral-style local layers), GQA, split-K.",
    launch=lambda t, o, p, cfg: paged_decode_attention(
        t["q"],
        t["k_cache"],
        t["v_cache"],
        t["block_table"],
        t["seq_lens"],
        o["out"],
        cfg,
        _window(p),
    ),
    baseline=Baseline(
        "torch gather of the pages + scaled_dot_product_attention with a length and "
        "sliding-window mask",
        _sdpa_baseline,
    ),
    workloads={"decode": _SLIDING_DECODE_CASES, "smoke": _SLIDING_DECODE_SMOKE},
)
