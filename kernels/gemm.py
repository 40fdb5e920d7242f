"""Dense GEMM ``C = A @ B`` with fp32 accumulation: one output tile per program.

The shape is Triton's matmul tutorial made safe for real tensors. Programs walk output tiles
in groups of ``GROUP_M`` row-tiles so that consecutive programs share B column-tiles in L2
(the weight is the large operand of an LLM projection). Every stride is a runtime argument,
so B may be a ``(K, N)`` matrix or the transposed view of an ``nn.Linear`` ``(N, K)`` weight;
the JIT specialises unit strides, which keeps the contiguous axis vectorised either way.
Row and column offsets are 64-bit because ``row * stride`` passes 2^31 once an operand holds
2^31 elements (the logits of 32k tokens over a 128k vocabulary do). fp32 inputs use TF32
tensor cores, as shipped kernels do.

Decode (M up to 32 tokens) has split-K configs: with one row-tile, an N/BLOCK_N grid leaves
most of the GPU idle while the weight streams through a few SMs, which is how a tile-per-
program GEMM loses to cuBLAS there. ``SPLIT_K`` programs then share each output tile's K
range; each stores its fp32 partial tile, and the last to arrive (an arrival counter per
tile) adds the partials in split order and writes C. One launch, deterministic whatever the
arrival order, and the autotuner times it whole, so it picks a split only where it pays.
"""

from __future__ import annotations

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
from kernelwatch.kernels.inputs import randn
from kernelwatch.kernels.models import DECODE_TOKENS, DENSE, dense_projections
from kernelwatch.kernels.tuning import Tunable


@triton.jit
def tile_indices(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The rows and columns of program ``pid``'s output tile, and the same wrapped into the
    matrix as 64-bit offsets. Programs walk ``GROUP_M`` row-tiles per column so consecutive
    programs share B's column-tiles in L2. Tail rows and columns wrap onto valid ones, so A
    and B loads need no M/N mask and stay in bounds; their products land only in the tile's
    tail, which the store drops."""
    # Ceiling divisions inline: tl.cdiv is a JIT function, which Triton's interpreter
    # runs at the cost of a nested call per program.
    num_pid_m = (M + BLOCK_M - 1) // BLOCK_M
    num_pid_n = (N + BLOCK_N - 1) // BLOCK_N
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    # The last group may hold fewer than GROUP_M row-tiles.
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    return rows, cols, (rows % M).to(tl.int64), (cols % N).to(tl.int64)


@triton.jit
def output_tile(c_ptr, rows, cols, M, N, stride_cm, stride_cn):
    """Pointers to the (rows, cols) tile of C, and which of them lie inside it."""
    rows64 = rows.to(tl.int64)
    cols64 = cols.to(tl.int64)
    c_ptrs = c_ptr + rows64[:, None] * stride_cm + cols64[None, :] * stride_cn
    return c_ptrs, (rows[:, None] < M) & (cols[None, :] < N)


@triton.jit
def finish_split_k(
    acc,
    c_ptrs,
    c_mask,
    partials_ptr,
    counters_ptr,
    tile,
    split,
    SPLIT_K: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Store this split's fp32 partial tile; the last split of the tile to arrive adds all
    of them in split order and stores the result through ``c_ptrs``."""
    tile_elems = BLOCK_M * BLOCK_N
    offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tile_base = partials_ptr + tile.to(tl.int64) * (SPLIT_K * tile_elems)
    tl.store(tile_base + split * tile_elems + offs, acc)
    # Every thread's part of the partial is stored before the arrival is counted; the
    # atomic's release then publishes them all (CUTLASS's split-K semaphore does the same).
    tl.debug_barrier()
    arrived = tl.atomic_add(counters_ptr + tile, 1, sem="acq_rel", scope="gpu")
    if arrived == SPLIT_K - 1:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for s in range(SPLIT_K):
            # .cg reads L2, where the other SMs' partials are, never a stale L1 line.
            total += tl.load(tile_base + s * tile_elems + offs, cache_modifier=".cg")
        tl.store(c_ptrs, total.to(c_ptrs.dtype.element_ty), mask=c_mask)
        # The next launch finds the counter at zero again.
        tl.atomic_xchg(counters_ptr + tile, 0)


@triton.jit
def gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    partials_ptr,
    counters_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bk,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    SPLIT_K: tl.constexpr,
):
    tile = tl.program_id(0)
    split = tl.program_id(1)
    rows, cols, rows_in, cols_in = tile_indices(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    # This split's share of K: whole BLOCK_K tiles, the last split taking what is left
    # (nothing, when K has fewer tiles than splits).
    k_tiles = ((K + BLOCK_K - 1) // BLOCK_K + SPLIT_K - 1) // SPLIT_K
    k_start = split * k_tiles * BLOCK_K
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows_in[:, None] * stride_am + (k_start + ks)[None, :] * stride_ak
    b_ptrs = b_ptr + (k_start + ks)[:, None] * stride_bk + cols_in[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, k_tiles):
        # Zero-filled K tail: zeros add nothing to the dot product.
        k_left = K - k_start - k * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < k_left, other=0.0)
        # tf32 applies to fp32 operands only; fp16/bf16 products are exact in fp32.
        acc = tl.dot(a, b, acc, input_precision="tf32")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs, c_mask = output_tile(c_ptr, rows, cols, M, N, stride_cm, stride_cn)
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        finish_split_k(
            acc, c_ptrs, c_mask, partials_ptr, counters_ptr, tile, split, SPLIT_K, BLOCK_M, BLOCK_N
        )


# Hopper/Blackwell tiles in the range Triton's tutorial and production matmuls tune over.
# 8 warps (two warpgroups) feed 128x256 and 256x128 wgmma tiles; 4-5 stages hide HBM latency
# for the smaller tiles. With fp32 operands the 128x128 and wider tiles need more shared
# memory than an SM has; they fail to launch and the autotuner skips them. The 16-row tile
# is for decode, where a 64-row tile would leave most of each MMA idle.
GEMM_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "SPLIT_K": 1}, w, s)
    for bm, bn, bk, w, s in (
        (128, 256, 64, 8, 3),
        (256, 128, 64, 8, 3),
        (128, 128, 64, 8, 4),
        (128, 128, 64, 4, 4),
        (128, 64, 64, 4, 4),
        (64, 128, 64, 4, 4),
        (64, 64, 32, 4, 5),
        (16, 64, 64, 4, 4),
    )
)
#: The largest M tuned over ``DECODE_CONFIGS``: one to 32 tokens in flight.
DECODE_MAX_M = 32
# Decode reads the whole weight for a few rows: memory-bound, so what matters is enough
# programs in flight to pull HBM bandwidth. A 4096-wide projection has 64 column-tiles of 64
# for 132 SMs; splitting K 2-16 ways fills them. Long BLOCK_K tiles keep each split's loads
# wide. The unsplit 16-row tile stays in the space for the wide projections (gate_up); at
# BLOCK_K 128 it spilled 8 B, so it keeps the prefill space's 64. The 64-row (wgmma / tcgen05)
# split tile takes 8 warps: at 4, sm_100a's m=1 build spilled 64 B.
DECODE_CONFIGS = tuple(
    LaunchConfig({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 1, "SPLIT_K": sk}, w, s)
    for bm, bn, bk, sk, w, s in (
        (16, 64, 64, 1, 4, 4),
        (16, 64, 128, 2, 4, 4),
        (16, 64, 128, 4, 4, 4),
        (16, 64, 128, 8, 4, 4),
        (16, 128, 128, 4, 4, 3),
        (32, 64, 128, 4, 4, 4),
        (64, 64, 128, 4, 8, 2),
        (16, 64, 256, 16, 4, 3),
    )
)
# Small enough for the CPU interpreter, which runs every program instance in Python. Split
# in two, so the interpreter checks the split-K path (partials, arrival, ordered sum) on every
# smoke case; unsplit, the kernel is that path's first half with a direct store.
GEMM_PINNED = LaunchConfig(
    {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 4, "SPLIT_K": 2}, 4, 2
)


GEMM_TUNABLE = Tunable(gemm_kernel, GEMM_CONFIGS, key=["M", "N", "K"])
GEMM_DECODE_TUNABLE = Tunable(gemm_kernel, DECODE_CONFIGS, key=["M", "N", "K"])


class SplitKWorkspace:
    """The partial tiles and per-tile arrival counters of split-K launches, one pair per
    device, grown on demand. Counters start at zero and every launch leaves them at zero, so
    launches need no memset; launches on one device must not overlap (kernelwatch runs one
    case at a time)."""

    def __init__(self) -> None:
        self._partials: dict[torch.device, torch.Tensor] = {}
        self._counters: dict[torch.device, torch.Tensor] = {}

    def get(
        self, device: torch.device, partial_elems: int, tiles: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 room for ``partial_elems`` and ``tiles`` zeroed int32 counters."""
        if device.type == "meta":  # recording a launch for the build: nothing runs
            return (
                torch.empty(partial_elems, dtype=torch.float32, device=device),
                torch.empty(tiles, dtype=torch.int32, device=device),
            )
        partials = self._partials.get(device)
        if partials is None or partials.numel() < partial_elems:
            partials = self._partials[device] = torch.empty(
                max(partial_elems, 1), dtype=torch.float32, device=device
            )
        counters = self._counters.get(device)
        if counters is None or counters.numel() < tiles:
            counters = self._counters[device] = torch.zeros(
                max(tiles, 1), dtype=torch.int32, device=device
            )
        return partials, counters


WORKSPACE = SplitKWorkspace()


def _tiles(m: int, n: int, meta: dict[str, int]) -> int:
    return triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"])


def _launch(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, config: LaunchConfig | None
) -> LaunchConfig:
    (m, k), (k_b, n) = a.shape, b.shape
    if k != k_b or c.shape != (m, n):
        raise ValueError(
            f"gemm shapes do not chain: A {tuple(a.shape)} B {tuple(b.shape)} C {tuple(c.shape)}"
        )
    tunable = GEMM_DECODE_TUNABLE if m <= DECODE_MAX_M else GEMM_TUNABLE
    # Room for the most any config it may run needs.
    candidates = tunable.configs if config is None else (config,)
    metas = [dict(cfg.meta) for cfg in candidates]
    split = [meta for meta in metas if meta["SPLIT_K"] > 1]
    partials, counters = WORKSPACE.get(
        a.device,
        max((_tiles(m, n, meta) * meta["SPLIT_K"] * meta["BLOCK_M"] * meta["BLOCK_N"]
             for meta in split), default=0),
        max((_tiles(m, n, meta) for meta in split), default=0),
    )  # fmt: skip
    args = (
        a,
        b,
        c,
        partials,
        counters,
        m,
        n,
        k,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )

    def grid(meta: dict[str, int]) -> tuple[int, int]:
        return (_tiles(m, n, meta), meta["SPLIT_K"])

    return tunable.launch(grid, args, {}, config)


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator
) -> dict[str, torch.Tensor]:
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    pad = int(p.get("a_row_pad", 0))
    a = randn((m, k + pad), dtype, device, gen)
    if pad:
        # NaN in the padding past column K turns an unmasked read of the K tail into a wrong
        # answer; random padding would be multiplied by B's zero-filled tail and go unseen.
        a[:, k:] = float("nan")
        a = a[:, :k]
    layout = p["b_layout"]
    if layout == "kn":
        b = randn((k, n), dtype, device, gen)
    elif layout == "nk":
        # nn.Linear stores its weight as (out, in) = (N, K); y = x @ W.T reads it transposed.
        b = randn((n, k), dtype, device, gen).t()
    else:
        raise ValueError(f"b_layout must be 'kn' or 'nk', got {layout!r}")
    return {"a": a, "b": b}


def _matmul_baseline(t: Tensors, p: Params) -> dict[str, torch.Tensor]:
    # cuBLAS runs fp32 in full precision unless allowed TF32; compare like with like.
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        return {"c": torch.matmul(t["a"], t["b"])}
    finally:
        torch.set_float32_matmul_precision(previous)


# (in_features K, out_features N) of Llama-3 projections: 8B qkv, o, gate_up, down;
# 70B qkv, gate_up, down. Weights are nn.Linear (N, K) tensors, read transposed.
_LLM_PROJECTIONS = (
    (4096, 6144),
    (4096, 4096),
    (4096, 28672),
    (14336, 4096),
    (8192, 10240),
    (8192, 57344),
    (28672, 8192),
)
_LLM_CASES = tuple(
    {"m": m, "n": n, "k": k, "b_layout": "nk"}
    for k, n in _LLM_PROJECTIONS
    for m in (1, 16, 128, 2048, 16384)
)
# Decode: 1-64 tokens through every projection of the dense models (models.py), the shapes
# split-K is for.
_DECODE_CASES = tuple(
    {"m": m, "n": n, "k": k, "b_layout": "nk", "model": model.name, "weight": weight}
    for model in DENSE
    for weight, k, n in dense_projections(model)
    for m in DECODE_TOKENS
)
# Interpreter shapes at the pinned 32x32x16 tiles: one token; M, N and K not multiples of
# the tiles with both B layouts and a strided A whose padding covers the K tail; K below one
# tile; and 5 row-tiles, so the grouped ordering has a short last group.
_SMOKE_CASES = (
    {"m": 1, "n": 40, "k": 48, "b_layout": "nk"},
    {"m": 33, "n": 40, "k": 48, "b_layout": "kn"},
    {"m": 33, "n": 40, "k": 40, "b_layout": "nk", "a_row_pad": 8},
    {"m": 20, "n": 24, "k": 10, "b_layout": "kn"},
    {"m": 130, "n": 40, "k": 16, "b_layout": "nk"},
)

GEMM = KernelSpec(
    name="gemm",
    summary="C = A @ B with fp32 accumulation, grouped tile order, any strides (nn.Linear).",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {
        "c": torch.empty(
            (t["a"].shape[0], t["b"].shape[1]), dtype=t["a"].dtype, device=t["a"].device
        )
    },
    launch=lambda t, o, p, cfg: _launch(t["a"], t["b"], o["c"], cfg),
    reference=lambda t, p: {"c": t["a"] @ t["b"]},
    baseline=Baseline("torch.matmul (cuBLAS)", _matmul_baseline),
    workloads={"smoke": _SMOKE_CASES, "llm": _LLM_CASES, "decode": _DECODE_CASES},
    flops=lambda p: 2 * int(p["m"]) * int(p["n"]) * int(p["k"]),
    min_bytes=lambda p, e: (
        e * (int(p["m"]) * int(p["k"]) + int(p["k"]) * int(p["n"]) + int(p["m"]) * int(p["n"]))
    ),
    # TF32 keeps 10 significand bits, like fp16: rounding both operands to it gives a relative
    # error near 3e-4, and near 8e-4 where the hardware truncates instead of rounding.
    tolerance={**DEFAULT_TOLERANCE, "fp32": 5e-3},
    # The decode space first: the autotuner of M > DECODE_MAX_M ends on GEMM_CONFIGS[-1].
    configs=DECODE_CONFIGS + GEMM_CONFIGS,
    pinned_config=GEMM_PINNED,
)
