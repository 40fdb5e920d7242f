"""Fused mixture-of-experts layer (the expert part of a Mixtral / DeepSeek-V3 / Qwen3 MoE
block), vLLM's fused-MoE design.

1. **Routing** (Triton): per token, the gate's scores over the experts (softmax, or sigmoid
   plus DeepSeek-V3's selection bias), optionally group-limited (the ``topk_group`` best of
   ``n_group`` groups, a group scored by its two best experts), then the ``top_k`` best
   experts and their weights, renormalised to sum to one and scaled.
2. **Alignment** (torch, on the device, no host sync): the (token, choice) slots sorted by
   expert and each expert's run padded to the GEMM's ``BLOCK_M``, so every row block of the
   grouped GEMM belongs to one expert; sizes are the shapes' upper bound, so nothing waits
   for the routing's result.
3. **Gate/up GEMM** (Triton): each row block multiplies its tokens' hidden states by its
   expert's fused gate and up projections, and applies SiLU(gate) * up before storing.
4. **Down GEMM** (Triton): each row block multiplies those activations by its expert's down
   projection and by the slot's routing weight, storing one row per (token, choice).
5. **Combine**: a token's ``top_k`` rows are summed (a fixed-order reduction, so the layer is
   deterministic, unlike an atomic scatter-add).

The spec checks the combined output against a float64 reference, and the chosen experts of
every token exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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
from kernelwatch.kernels.inputs import next_pow2, randn
from kernelwatch.kernels.models import (
    DECODE_TOKENS,
    DEEPSEEK_V3,
    MIXTRAL_8X7B,
    PREFILL_TOKENS,
    QWEN3_30B_A3B,
    Model,
)

_ROUTE_TOKENS = 16


@triton.jit
def moe_route_kernel(
    logits_ptr,
    bias_ptr,
    ids_ptr,
    weights_ptr,
    T,
    E,
    stride_lt,
    scale,
    TOP_K: tl.constexpr,
    SIGMOID: tl.constexpr,
    N_GROUP: tl.constexpr,
    TOPK_GROUP: tl.constexpr,
    RENORMALIZE: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_E: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    tokens = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    experts = tl.arange(0, BLOCK_E)
    t_mask = tokens < T
    e_mask = experts < E
    logits = tl.load(
        logits_ptr + tokens.to(tl.int64)[:, None] * stride_lt + experts[None, :],
        mask=t_mask[:, None] & e_mask[None, :],
        other=0.0,
    ).to(tl.float32)
    logits = tl.where(e_mask[None, :], logits, float("-inf"))
    if SIGMOID:
        scores = 1 / (1 + tl.exp(-logits))
        # DeepSeek-V3's bias steers which experts are chosen, not what they weigh.
        bias = tl.load(bias_ptr + experts, mask=e_mask, other=0.0)
        choice = scores + bias[None, :]
    else:
        p = tl.exp(logits - tl.max(logits, 1)[:, None])
        scores = p / tl.sum(p, 1)[:, None]
        # Softmax keeps the logits' order: choosing on the logits cannot round differently.
        choice = logits
    choice = tl.where(e_mask[None, :], choice, float("-inf"))

    if N_GROUP > 1:
        group_of = experts // (E // N_GROUP)
        groups = tl.arange(0, N_GROUP)
        group_score = tl.zeros((BLOCK_T, N_GROUP), dtype=tl.float32)
        for g in tl.static_range(N_GROUP):
            member = tl.where(group_of[None, :] == g, choice, float("-inf"))
            best = tl.argmax(member, 1)
            second = tl.where(experts[None, :] == best[:, None], float("-inf"), member)
            pair = tl.max(member, 1) + tl.max(second, 1)
            group_score = tl.where(groups[None, :] == g, pair[:, None], group_score)
        allowed = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.int1)
        for _ in tl.static_range(TOPK_GROUP):
            picked = tl.argmax(group_score, 1)
            allowed = allowed | (group_of[None, :] == picked[:, None])
            group_score = tl.where(groups[None, :] == picked[:, None], float("-inf"), group_score)
        choice = tl.where(allowed, choice, float("-inf"))

    slots = tl.arange(0, BLOCK_K)
    ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    weights = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        best = tl.argmax(choice, 1)
        hit = experts[None, :] == best[:, None]
        weight = tl.sum(tl.where(hit, scores, 0.0), 1)
        ids = tl.where(slots[None, :] == k, best[:, None], ids)
        weights = tl.where(slots[None, :] == k, weight[:, None], weights)
        choice = tl.where(hit, float("-inf"), choice)
    if RENORMALIZE:
        weights = weights / tl.sum(weights, 1)[:, None]
    weights = weights * scale
    out = tokens.to(tl.int64)[:, None] * TOP_K + slots[None, :]
    out_mask = t_mask[:, None] & (slots[None, :] < TOP_K)
    tl.store(ids_ptr + out, ids, mask=out_mask)
    tl.store(weights_ptr + out, weights, mask=out_mask)


@triton.jit
def moe_gemm_kernel(
    a_ptr,
    w_ptr,
    c_ptr,
    sorted_slots_ptr,
    block_expert_ptr,
    topk_weights_ptr,
    slots,
    N,
    K,
    stride_am,
    stride_ak,
    stride_we,
    stride_wn,
    stride_wk,
    stride_cm,
    stride_cn,
    ROWS_PER_TOKEN: tl.constexpr,
    FUSE_SILU: tl.constexpr,
    APPLY_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    """One (row block, column block) of a grouped GEMM: row block ``pid_m`` holds slots of
    one expert (padding slots are ``slots``, out of range). A slot's A row is
    ``slot // ROWS_PER_TOKEN`` (the token, for the gate/up GEMM; the slot itself after it).
    With ``FUSE_SILU`` the weight holds N gate rows then N up rows and the program computes
    both, storing SiLU(gate) * up."""
    column_blocks = (N + BLOCK_N - 1) // BLOCK_N
    pid_m = tl.program_id(0) // column_blocks
    pid_n = tl.program_id(0) % column_blocks
    expert = tl.load(block_expert_ptr + pid_m)
    if expert < 0:  # a block past the last expert's padded run: nothing to do
        return
    slot = tl.load(sorted_slots_ptr + pid_m * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = slot < slots
    rows = (slot // ROWS_PER_TOKEN).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    # Tail columns wrap onto valid ones (as in gemm.py); the store drops them.
    cols_in = (cols % N).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    w_base = w_ptr + expert.to(tl.int64) * stride_we
    w_ptrs = w_base + ks[:, None] * stride_wk + cols_in[None, :] * stride_wn
    up_ptrs = w_ptrs + N * stride_wn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, (K + BLOCK_K - 1) // BLOCK_K):
        k_in = ks < K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=valid[:, None] & k_in[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_in[:, None], other=0.0)
        acc = tl.dot(a, w, acc, input_precision="tf32")
        if FUSE_SILU:
            up = tl.load(up_ptrs, mask=k_in[:, None], other=0.0)
            acc_up = tl.dot(a, up, acc_up, input_precision="tf32")
            up_ptrs += BLOCK_K * stride_wk
        a_ptrs += BLOCK_K * stride_ak
        w_ptrs += BLOCK_K * stride_wk
    if FUSE_SILU:
        acc = acc / (1 + tl.exp(-acc)) * acc_up
    if APPLY_WEIGHT:
        acc = acc * tl.load(topk_weights_ptr + slot, mask=valid, other=0.0)[:, None]
    c_ptrs = c_ptr + slot.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=valid[:, None] & (cols[None, :] < N))


@dataclass(frozen=True)
class Routing:
    """How a model routes: the gate, experts per token, group-limited selection, and what is
    done to the chosen experts' weights."""

    top_k: int
    sigmoid: bool
    n_group: int
    topk_group: int
    renormalize: bool
    scale: float

    @classmethod
    def of(cls, p: Params) -> Routing:
        return cls(
            top_k=int(p["top_k"]),
            sigmoid=p["gate"] == "sigmoid",
            n_group=int(p.get("n_group", 1)),
            topk_group=int(p.get("topk_group", 1)),
            renormalize=bool(p["renormalize"]),
            scale=float(p.get("scale", 1.0)),
        )


def route(
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    ids: torch.Tensor,
    weights: torch.Tensor,
    routing: Routing,
) -> None:
    """Top-k routing of ``logits`` (T, E) into ``ids`` (T, top_k, int32) and ``weights``
    (T, top_k, fp32); ``bias`` (E,) is the sigmoid gate's selection bias."""
    tokens, experts = logits.shape
    if routing.sigmoid != (bias is not None) or experts % routing.n_group:
        raise ValueError(
            f"routing {routing} does not fit {experts} experts (a sigmoid gate takes a bias, "
            "groups must divide the experts)"
        )
    if routing.n_group > 1 and experts != next_pow2(experts):
        raise ValueError(f"group-limited routing needs a power-of-two expert count, not {experts}")
    moe_route_kernel[(triton.cdiv(tokens, _ROUTE_TOKENS),)](
        logits,
        logits if bias is None else bias,
        ids,
        weights,
        tokens,
        experts,
        logits.stride(0),
        routing.scale,
        TOP_K=routing.top_k,
        SIGMOID=routing.sigmoid,
        N_GROUP=routing.n_group,
        TOPK_GROUP=routing.topk_group,
        RENORMALIZE=routing.renormalize,
        BLOCK_T=_ROUTE_TOKENS,
        BLOCK_E=next_pow2(experts),
        BLOCK_K=next_pow2(routing.top_k),
        num_warps=4,
    )


def align_to_blocks(
    ids: torch.Tensor, experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The (token, choice) slots of ``ids`` grouped by expert, each expert's run padded to a
    multiple of ``block_m`` with the out-of-range slot ``ids.numel()``; and each block's
    expert (-1 past the last run). Sized for the worst case, so no host sync is needed."""
    slots = ids.numel()
    device = ids.device
    flat = ids.reshape(-1).long()
    counts = torch.zeros(experts, dtype=torch.long, device=device)
    counts.scatter_add_(0, flat, torch.ones_like(flat))
    padded = (counts + block_m - 1) // block_m * block_m
    ends = padded.cumsum(0)
    order = torch.argsort(flat, stable=True)
    expert_of = flat[order]
    rank = torch.arange(slots, device=device) - (counts.cumsum(0) - counts)[expert_of]
    destination = (ends - padded)[expert_of] + rank
    capacity = triton.cdiv(slots + experts * (block_m - 1), block_m) * block_m
    sorted_slots = torch.full((capacity,), slots, dtype=torch.int32, device=device)
    sorted_slots[destination] = order.to(torch.int32)
    block_starts = torch.arange(0, capacity, block_m, device=device)
    block_expert = torch.searchsorted(ends, block_starts, right=True)
    block_expert = torch.where(block_expert < experts, block_expert, -1).to(torch.int32)
    return sorted_slots, block_expert


def grouped_gemm(
    a: torch.Tensor,
    w: torch.Tensor,
    c: torch.Tensor,
    sorted_slots: torch.Tensor,
    block_expert: torch.Tensor,
    topk_weights: torch.Tensor,
    rows_per_token: int,
    fuse_silu: bool,
    config: LaunchConfig,
) -> None:
    """``c[slot] = a[slot // rows_per_token] @ w[expert].T`` over the aligned slots (see
    :func:`moe_gemm_kernel`); ``w`` is (experts, out_features, in_features)."""
    n = w.shape[1] // 2 if fuse_silu else w.shape[1]
    meta = config.meta
    grid = (block_expert.numel() * triton.cdiv(n, meta["BLOCK_N"]),)
    moe_gemm_kernel[grid](
        a,
        w,
        c,
        sorted_slots,
        block_expert,
        topk_weights,
        topk_weights.numel(),
        n,
        a.shape[1],
        *a.stride(),
        *w.stride(),
        *c.stride(),
        ROWS_PER_TOKEN=rows_per_token,
        FUSE_SILU=fuse_silu,
        APPLY_WEIGHT=not fuse_silu,
        BLOCK_M=meta["BLOCK_M"],
        BLOCK_N=meta["BLOCK_N"],
        BLOCK_K=meta["BLOCK_K"],
        num_warps=config.num_warps,
        num_stages=config.num_stages,
    )


# Tiles in the range vLLM's fused-MoE configs tune over, chosen by tokens per expert: 16-row
# blocks while an expert sees a few tokens (decode), 64 and 128 once it sees many (prefill).
MOE_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk}, w, s)
    for bm, bn, bk, w, s in ((16, 64, 128, 4, 3), (64, 128, 64, 4, 3), (128, 128, 64, 8, 3))
)
# Small enough for the CPU interpreter.
MOE_PINNED = LaunchConfig({"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 32}, 4, 1)


def _heuristic(tokens_per_expert: float) -> LaunchConfig:
    if tokens_per_expert <= 16:
        return MOE_CONFIGS[0]
    return MOE_CONFIGS[1] if tokens_per_expert <= 256 else MOE_CONFIGS[2]


def fused_moe(
    x: torch.Tensor,
    logits: torch.Tensor,
    bias: torch.Tensor | None,
    w13: torch.Tensor,
    w2: torch.Tensor,
    out: torch.Tensor,
    ids: torch.Tensor,
    routing: Routing,
    config: LaunchConfig | None,
) -> LaunchConfig:
    """The MoE layer's experts: ``x`` (T, hidden), router ``logits`` (T, E), ``w13`` (E,
    2 x intermediate, hidden) gate then up, ``w2`` (E, hidden, intermediate); writes ``out``
    (T, hidden) and the chosen experts ``ids`` (T, top_k)."""
    tokens, hidden = x.shape
    experts, intermediate = w13.shape[0], w13.shape[1] // 2
    if w2.shape != (experts, hidden, intermediate) or w13.shape[2] != hidden:
        raise ValueError(
            f"MoE weights do not chain: x {tuple(x.shape)} w13 {tuple(w13.shape)} "
            f"w2 {tuple(w2.shape)}"
        )
    config = config or _heuristic(tokens * routing.top_k / experts)
    weights = torch.empty((tokens, routing.top_k), dtype=torch.float32, device=x.device)
    route(logits, bias, ids, weights, routing)
    sorted_slots, block_expert = align_to_blocks(ids, experts, int(config.meta["BLOCK_M"]))
    slots = tokens * routing.top_k
    act = torch.empty((slots, intermediate), dtype=x.dtype, device=x.device)
    grouped_gemm(x, w13, act, sorted_slots, block_expert, weights, routing.top_k, True, config)
    rows = torch.empty((slots, hidden), dtype=x.dtype, device=x.device)
    grouped_gemm(act, w2, rows, sorted_slots, block_expert, weights, 1, False, config)
    torch.sum(rows.view(tokens, routing.top_k, hidden), dim=1, out=out)
    return config


def route_reference(
    logits: torch.Tensor, bias: torch.Tensor | None, routing: Routing
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same routing in torch: (ids, weights), in the logits' precision."""
    if routing.sigmoid:
        scores = logits.sigmoid()
        choice = scores + bias
    else:
        scores = logits.softmax(-1)
        choice = logits
    if routing.n_group > 1:
        tokens, experts = logits.shape
        grouped = choice.view(tokens, routing.n_group, experts // routing.n_group)
        group_score = grouped.topk(2, dim=-1).values.sum(-1)
        picked = group_score.topk(routing.topk_group, dim=-1).indices
        allowed = torch.zeros_like(group_score, dtype=torch.bool).scatter_(1, picked, True)
        choice = choice.masked_fill(~allowed.repeat_interleave(grouped.shape[-1], 1), -math.inf)
    ids = choice.topk(routing.top_k, dim=-1).indices
    weights = scores.gather(1, ids)
    if routing.renormalize:
        weights = weights / weights.sum(-1, keepdim=True)
    return ids, weights * routing.scale


def _expert_mlp(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    gate, up = (x @ w13.T).chunk(2, dim=-1)
    return (F.silu(gate) * up) @ w2.T


def _loop_over_experts(t: Tensors, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Each chosen expert's MLP on its tokens, weighted and added up per token."""
    x = t["x"]
    out = torch.zeros_like(x)
    for expert in ids.unique().tolist():
        token, choice = (ids == expert).nonzero(as_tuple=True)
        y = _expert_mlp(x[token], t["w13"][expert], t["w2"][expert])
        out.index_add_(0, token, y * weights[token, choice, None])
    return out


def _reference(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    ids, weights = route_reference(t["logits"], t.get("bias"), Routing.of(p))
    return {"out": _loop_over_experts(t, ids, weights), "topk_ids": ids.to(torch.int32)}


def _baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    """torch's grouped GEMM (``torch._grouped_mm``, bf16) where the build has it, else a loop
    over the experts: the MoE layer as torch runs it, routing included."""
    x, w13, w2 = t["x"], t["w13"], t["w2"]
    ids, weights = route_reference(t["logits"].float(), t.get("bias"), Routing.of(p))
    weights = weights.to(x.dtype)
    if x.dtype != torch.bfloat16 or not hasattr(torch, "_grouped_mm"):
        return {"out": _loop_over_experts(t, ids, weights), "topk_ids": ids.to(torch.int32)}
    order = ids.reshape(-1).argsort(stable=True)
    token = order // ids.shape[1]
    offsets = torch.bincount(ids.reshape(-1), minlength=w13.shape[0]).cumsum(0).to(torch.int32)
    gate, up = torch._grouped_mm(x[token], w13.transpose(1, 2), offs=offsets).chunk(2, dim=-1)
    y = torch._grouped_mm(F.silu(gate) * up, w2.transpose(1, 2), offs=offsets)
    out = torch.zeros_like(x).index_add_(0, token, y * weights.reshape(-1)[order, None])
    return {"out": out, "topk_ids": ids.to(torch.int32)}


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    tokens, hidden, inter = int(p["tokens"]), int(p["hidden"]), int(p["intermediate"])
    experts = int(p["experts"])
    inputs = {
        "x": randn((tokens, hidden), dtype, device, gen),
        "logits": randn((tokens, experts), dtype, device, gen),
        # nn.Linear-style (out, in) expert weights scaled like trained ones (1 / sqrt(in)),
        # so activations stay near unit size through both projections.
        "w13": randn((experts, 2 * inter, hidden), dtype, device, gen, scale=hidden**-0.5),
        "w2": randn((experts, hidden, inter), dtype, device, gen, scale=inter**-0.5),
    }
    if p["gate"] == "sigmoid":
        inputs["bias"] = randn((experts,), torch.float32, device, gen, scale=0.1)
    return inputs


def _outputs(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    x = t["x"]
    ids = torch.empty((x.shape[0], int(p["top_k"])), dtype=torch.int32, device=x.device)
    return {"out": torch.empty_like(x), "topk_ids": ids}


def _active_experts(p: Params) -> float:
    """Experts a random routing of the case's tokens touches, on average: every expert is
    missed by a token with probability 1 - top_k / experts."""
    experts, top_k = int(p["experts"]), int(p["top_k"])
    return experts * (1 - (1 - top_k / experts) ** int(p["tokens"]))


def _min_bytes(p: Params, elem: int) -> int:
    tokens, hidden, inter = int(p["tokens"]), int(p["hidden"]), int(p["intermediate"])
    top_k = int(p["top_k"])
    weights = round(_active_experts(p)) * 3 * hidden * inter
    # x and out, the logits; the active experts' weights; the chosen ids and weights
    io = 2 * tokens * hidden + tokens * int(p["experts"])
    return elem * (io + weights) + 8 * tokens * top_k


def _routing_params(model: Model) -> dict[str, int | float | str | bool]:
    if model.config.get("scoring_func") == "sigmoid":
        return {
            "gate": "sigmoid",
            "n_group": model["n_group"],
            "topk_group": model["topk_group"],
            "renormalize": bool(model.value("norm_topk_prob")),
            "scale": float(model.value("routed_scaling_factor")),
        }
    # Mixtral renormalises its top-2 (a softmax over them); Qwen3 says so in norm_topk_prob.
    return {"gate": "softmax", "renormalize": bool(model.config.get("norm_topk_prob", True))}


# (model, its config's expert count field, its expert intermediate size field)
_MOE_MODELS = (
    (MIXTRAL_8X7B, "num_local_experts", "intermediate_size"),
    (DEEPSEEK_V3, "n_routed_experts", "moe_intermediate_size"),
    (QWEN3_30B_A3B, "num_experts", "moe_intermediate_size"),
)


def _moe_cases(decode_only: bool) -> tuple[Params, ...]:
    """Per model: one token, then as many as give each expert 1-64 tokens on average
    (decode), then prefill chunks."""
    cases = []
    for model, experts_field, inter_field in _MOE_MODELS:
        experts, top_k = model[experts_field], model["num_experts_per_tok"]
        decode = {max(1, math.ceil(n * experts / top_k)) for n in DECODE_TOKENS} | {1}
        counts = sorted(decode if decode_only else decode | set(PREFILL_TOKENS))
        cases += [
            {
                "tokens": tokens,
                "hidden": model["hidden_size"],
                "intermediate": model[inter_field],
                "experts": experts,
                "top_k": top_k,
                **_routing_params(model),
                "model": model.name,
            }
            for tokens in counts
        ]
    return tuple(cases)


# Interpreter shapes at 16-row blocks: one token through 2 of 8 experts; DeepSeek-style
# sigmoid routing with a bias over 4 groups of 4 experts, the 2 best groups, top 4, scaled
# 2.5, an intermediate no block divides; and 21 tokens, top 2 of 8 without renormalising,
# so some experts get more than one block.
_SMOKE_CASES = (
    {"tokens": 1, "hidden": 32, "intermediate": 32, "experts": 8, "top_k": 2,
     "gate": "softmax", "renormalize": True},
    {"tokens": 7, "hidden": 64, "intermediate": 40, "experts": 16, "top_k": 4,
     "gate": "sigmoid", "n_group": 4, "topk_group": 2, "renormalize": True, "scale": 2.5},
    {"tokens": 21, "hidden": 48, "intermediate": 32, "experts": 8, "top_k": 2,
     "gate": "softmax", "renormalize": False},
)  # fmt: skip

FUSED_MOE = KernelSpec(
    name="fused_moe",
    summary="MoE experts: top-k routing, expert-sorted blocks, gate/up + SiLU, down + combine.",
    make_inputs=_inputs,
    make_outputs=_outputs,
    launch=lambda t, o, p, cfg: fused_moe(
        t["x"],
        t["logits"],
        t.get("bias"),
        t["w13"],
        t["w2"],
        o["out"],
        o["topk_ids"],
        Routing.of(p),
        cfg,
    ),
    reference=_reference,
    baseline=Baseline("torch._grouped_mm (bf16), else a torch loop over experts", _baseline),
    # The model family first: a build without --workload compiles a spec's first workload.
    workloads={"moe": _moe_cases(False), "decode": _moe_cases(True), "smoke": _SMOKE_CASES},
    # gate+up (2 x intermediate wide) and down, per token and chosen expert
    flops=lambda p: (
        6 * int(p["tokens"]) * int(p["top_k"]) * int(p["hidden"]) * int(p["intermediate"])
    ),
    min_bytes=_min_bytes,
    # fp32 operands go through TF32 tensor cores, as in gemm.py.
    tolerance={**DEFAULT_TOLERANCE, "fp32": 5e-3},
    configs=MOE_CONFIGS,
    pinned_config=MOE_PINNED,
)
