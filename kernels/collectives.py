"""The built-in communication suite: NCCL's collectives (gloo on the CPU) and an MoE
expert-parallel dispatch/combine, each checked on every rank against a float64 reference
and timed in lockstep across ranks (docs/DISTRIBUTED.md). Point a multi-GPU pool at it with
``suite = "kernelwatch.kernels.collectives"``.

Message sizes follow nccl-tests: a case's ``bytes`` is the size S its bus bandwidth is
computed from (the whole buffer of an all-reduce, the total gathered or scattered array, one
rank's send buffer of an all-to-all), rounded down to whole elements per rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from kernelwatch.harness.spec import (
    Comm,
    DistributedSpec,
    LaunchConfig,
    Params,
    Suite,
    Tensors,
    World,
)
from kernelwatch.kernels.inputs import randn
from kernelwatch.kernels.symmetric import ONE_SHOT_ALL_REDUCE

# all_gather_single / reduce_scatter_single are the names from torch 2.13 on.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

#: Bytes per element, by torch dtype (inputs arrive as tensors).
_CHUNKED = ("all_gather", "reduce_scatter", "all_to_all")


def chunk(p: Params, elem: int, collective: str) -> int:
    """Elements of one rank's chunk: S split over the ranks where S spans them all."""
    parts = World.of(p).size if collective in _CHUNKED else 1
    return max(1, int(p["bytes"]) // (elem * parts))


def _message_bytes(collective: str) -> Callable[[Params, int], int]:
    def count(p: Params, elem: int) -> int:
        parts = World.of(p).size if collective in _CHUNKED else 1
        return chunk(p, elem, collective) * elem * parts

    return count


def _elem(t: torch.Tensor) -> int:
    return t.element_size()


# Message sizes of nccl-tests' sweeps: 8 KiB to 1 GiB, by factors of 4 (and 1 GiB), at the
# world sizes of one node.
_SIZES = (*(8192 * 4**i for i in range(9)), 1 << 30)
_WORLDS = (2, 4, 8)
_LLM = tuple({"gpus_per_node": n, "bytes": s} for n in _WORLDS for s in _SIZES)
# The CPU: two ranks at one element and at a count no power of two divides, four ranks.
_SMOKE = (
    {"gpus_per_node": 2, "bytes": 8},
    {"gpus_per_node": 2, "bytes": 264},
    {"gpus_per_node": 4, "bytes": 1024},
)


def _buffer(collective: str, whole: bool) -> Callable[..., dict[str, torch.Tensor]]:
    """Random inputs of one rank: its chunk, or (``whole``) ``ranks`` chunks."""

    def make(
        p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator, rank: int
    ) -> dict[str, torch.Tensor]:
        n = chunk(p, torch.tensor([], dtype=dtype).element_size(), collective)
        parts = World.of(p).size if whole else 1
        return {"x": randn((n * parts,), dtype, device, gen)}

    return make


def _spec(
    name: str,
    summary: str,
    collective: str,
    whole_input: bool,
    out_parts: Callable[[Params], int],
    launch: Callable[[Tensors, Tensors, Params, Comm], LaunchConfig | None],
    reference: Callable[[Sequence[Tensors], Params, int], dict[str, torch.Tensor]],
) -> DistributedSpec:
    def outputs(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
        n = chunk(p, _elem(t["x"]), collective)
        return {"out": torch.empty(n * out_parts(p), dtype=t["x"].dtype, device=t["x"].device)}

    return DistributedSpec(
        name=name,
        summary=summary,
        make_inputs=_buffer(collective, whole_input),
        make_outputs=outputs,
        launch=launch,
        reference=reference,
        collective=collective,
        message_bytes=_message_bytes(collective),
        workloads={"smoke": _SMOKE, "llm": _LLM},
        dtypes=("fp32", "bf16"),
    )


def _all_reduce(t: Tensors, o: Tensors, p: Params, c: Comm) -> None:
    o["out"].copy_(t["x"])
    dist.all_reduce(o["out"], group=c.group)


def _ranks(p: Params) -> int:
    return World.of(p).size


def _one(p: Params) -> int:
    return 1


def _stack(everyone: Sequence[Tensors]) -> torch.Tensor:
    return torch.stack([t["x"] for t in everyone])


ALL_REDUCE = _spec(
    "all_reduce",
    "NCCL all-reduce (sum): every rank ends with the sum of every rank's buffer.",
    "all_reduce",
    False,
    _one,
    _all_reduce,
    lambda everyone, p, rank: {"out": _stack(everyone).sum(0)},
)

ALL_GATHER = _spec(
    "all_gather",
    "NCCL all-gather: every rank ends with every rank's chunk, in rank order.",
    "all_gather",
    False,
    _ranks,
    lambda t, o, p, c: _all_gather(o["out"], t["x"], group=c.group),
    lambda everyone, p, rank: {"out": _stack(everyone).reshape(-1)},
)


def _scattered(everyone: Sequence[Tensors], p: Params, rank: int) -> dict[str, torch.Tensor]:
    total = _stack(everyone).sum(0)
    return {"out": total.chunk(len(everyone))[rank]}


REDUCE_SCATTER = _spec(
    "reduce_scatter",
    "NCCL reduce-scatter (sum): rank r ends with chunk r of the sum of every rank's buffer.",
    "reduce_scatter",
    True,
    _one,
    lambda t, o, p, c: _reduce_scatter(o["out"], t["x"], group=c.group),
    _scattered,
)


def _exchanged(everyone: Sequence[Tensors], p: Params, rank: int) -> dict[str, torch.Tensor]:
    return {"out": torch.cat([t["x"].chunk(len(everyone))[rank] for t in everyone])}


ALL_TO_ALL = _spec(
    "all_to_all",
    "NCCL all-to-all: chunk j of rank i's buffer becomes chunk i of rank j's.",
    "all_to_all",
    True,
    _ranks,
    lambda t, o, p, c: dist.all_to_all_single(o["out"], t["x"], group=c.group),
    _exchanged,
)


# --- MoE expert-parallel dispatch and combine (DeepEP-style, over all-to-all-v) ---------


def route(
    logits: torch.Tensor, bias: torch.Tensor | None, p: Params
) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k routing of ``logits`` (T, E) into expert ids (T, k) and weights (T, k), in the
    logits' precision, the way the fused-MoE workloads route (params ``top_k``, ``gate``
    ``softmax`` or ``sigmoid`` with a selection ``bias``, ``n_group``/``topk_group``
    group-limited choice, ``renormalize``, ``scale``)."""
    if p["gate"] == "sigmoid":
        scores = logits.sigmoid()
        choice = scores + bias
    else:
        scores = logits.softmax(-1)
        choice = logits
    groups = int(p.get("n_group", 1))
    if groups > 1:
        tokens, experts = logits.shape
        grouped = choice.view(tokens, groups, experts // groups)
        best = grouped.topk(2, dim=-1).values.sum(-1).topk(int(p["topk_group"]), dim=-1).indices
        allowed = torch.zeros_like(grouped[..., 0], dtype=torch.bool).scatter_(1, best, True)
        choice = choice.masked_fill(~allowed.repeat_interleave(experts // groups, 1), -math.inf)
    ids = choice.topk(int(p["top_k"]), dim=-1).indices
    weights = scores.gather(1, ids)
    if p["renormalize"]:
        weights = weights / weights.sum(-1, keepdim=True)
    return ids, weights * float(p.get("scale", 1.0))


def expert_scale(experts: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """What each expert does to a token here: multiply it by its own factor, so a token that
    reaches the wrong expert, or comes back to the wrong slot, changes the result."""
    return (1.0 + torch.arange(experts, device=device, dtype=torch.float64) / experts).to(dtype)


def _moe_inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator, rank: int
) -> dict[str, torch.Tensor]:
    tokens, hidden, experts = int(p["tokens"]), int(p["hidden"]), int(p["experts"])
    inputs = {
        "x": randn((tokens, hidden), dtype, device, gen),
        "logits": randn((tokens, experts), torch.float32, device, gen),
    }
    if p["gate"] == "sigmoid":
        inputs["bias"] = randn((experts,), torch.float32, device, gen, scale=0.1)
    return inputs


def _dispatch_combine(t: Tensors, o: Tensors, p: Params, c: Comm) -> LaunchConfig | None:
    """Send every (token, choice) to the rank owning its expert (counts first, then the
    tokens and their expert ids), apply the expert there, send the results back, and add
    them up per token weighted by the routing."""
    x, experts = t["x"], int(p["experts"])
    ids, weights = route(t["logits"], t.get("bias"), p)
    owner = ids.reshape(-1) // (experts // c.size)
    order = torch.argsort(owner, stable=True)
    token = torch.arange(x.shape[0], device=x.device).repeat_interleave(ids.shape[1])[order]
    send = torch.bincount(owner, minlength=c.size)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=c.group)
    sends, recvs = send.tolist(), recv.tolist()
    arrived = x.new_empty((sum(recvs), x.shape[1]))
    dist.all_to_all_single(arrived, x[token].contiguous(), recvs, sends, group=c.group)
    arrived_ids = ids.new_empty(sum(recvs))
    dist.all_to_all_single(arrived_ids, ids.reshape(-1)[order], recvs, sends, group=c.group)
    done = arrived * expert_scale(experts, x.dtype, x.device)[arrived_ids, None]
    back = torch.empty_like(x[token])
    dist.all_to_all_single(back, done, sends, recvs, group=c.group)
    combined = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    combined.index_add_(0, token, back.float() * weights.reshape(-1)[order, None])
    o["out"].copy_(combined)
    return None


def _moe_reference(everyone: Sequence[Tensors], p: Params, rank: int) -> dict[str, torch.Tensor]:
    t = everyone[rank]
    ids, weights = route(t["logits"], t.get("bias"), p)
    scale = expert_scale(int(p["experts"]), torch.float64, t["x"].device)
    return {"out": t["x"] * (weights * scale[ids]).sum(-1, keepdim=True)}


def _moe_bytes(p: Params, elem: int) -> int:
    # Each rank sends tokens x top_k rows out (dispatch) and receives as many back (combine).
    return 2 * int(p["tokens"]) * int(p["top_k"]) * int(p["hidden"]) * elem


# Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3 routing (their config.json: hidden_size,
# num_local_experts / num_experts / n_routed_experts, num_experts_per_tok, scoring_func,
# n_group, topk_group, norm_topk_prob, routed_scaling_factor), experts split over 4 or 8
# ranks, decode to prefill tokens per rank.
_MOE_MODELS = (
    {"hidden": 4096, "experts": 8, "top_k": 2, "gate": "softmax", "renormalize": True},
    {"hidden": 2048, "experts": 128, "top_k": 8, "gate": "softmax", "renormalize": True},
    {"hidden": 7168, "experts": 256, "top_k": 8, "gate": "sigmoid", "n_group": 8,
     "topk_group": 4, "renormalize": True, "scale": 2.5},
)  # fmt: skip
_MOE_LLM = tuple(
    {"gpus_per_node": n, "tokens": tokens, **model}
    for model in _MOE_MODELS
    for n in (4, 8)
    for tokens in (1, 16, 128, 512, 4096)
)
_MOE_SMOKE = (
    {"gpus_per_node": 2, "tokens": 5, "hidden": 16, "experts": 8, "top_k": 2,
     "gate": "softmax", "renormalize": True},
    {"gpus_per_node": 4, "tokens": 7, "hidden": 24, "experts": 16, "top_k": 4,
     "gate": "sigmoid", "n_group": 4, "topk_group": 2, "renormalize": True, "scale": 2.5},
)  # fmt: skip

MOE_DISPATCH_COMBINE = DistributedSpec(
    name="moe_dispatch_combine",
    summary="Expert-parallel MoE: tokens to their experts' ranks and back (all-to-all-v).",
    make_inputs=_moe_inputs,
    make_outputs=lambda t, p: {"out": torch.empty_like(t["x"])},
    launch=_dispatch_combine,
    reference=_moe_reference,
    collective="all_to_all",
    message_bytes=_moe_bytes,
    workloads={"smoke": _MOE_SMOKE, "llm": _MOE_LLM},
    dtypes=("fp32", "bf16"),
)

SUITE = Suite(
    name="comm",
    kernels=(
        ALL_REDUCE,
        ALL_GATHER,
        REDUCE_SCATTER,
        ALL_TO_ALL,
        MOE_DISPATCH_COMBINE,
        ONE_SHOT_ALL_REDUCE,
    ),
)
