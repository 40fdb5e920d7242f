"""A custom one-shot all-reduce over PyTorch symmetric memory, in Triton: the kind of kernel
a serving team writes for small tensor-parallel all-reduces, where NCCL's ring costs more
latency than the bytes are worth. Timed beside NCCL's all-reduce (its baseline).

Every rank copies its input into its symmetric buffer; one kernel then waits until every
rank's buffer is written (a barrier on the signal pads, release/acquire at system scope),
reads all ``world_size`` buffers through peer pointers (NVLink), sums them in fp32 and
writes the result; a second barrier keeps any rank from overwriting its buffer while others
still read it. It needs CUDA GPUs and a torch with ``torch.distributed._symmetric_memory``:
elsewhere (gloo on the CPU) the case is reported unsupported. GPU-only: ``kernelwatch check
--suite kernelwatch.kernels.collectives`` runs it on a node with two GPUs or more; it has not
run on one yet (docs/DISTRIBUTED.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from kernelwatch.harness.spec import (
    Comm,
    CommBaseline,
    DistributedSpec,
    KernelUnsupported,
    LaunchConfig,
    Params,
    Tensors,
)
from kernelwatch.kernels.inputs import randn

BLOCK = 1024
MAX_BLOCKS = 24  # signal-pad slots per peer are per block: keep the grid small


@triton.jit
def _barrier(signal_pads, block, rank: tl.constexpr, world_size: tl.constexpr) -> None:
    """Block ``block`` of every rank meets here: it raises its flag in each peer's pad,
    then waits for (and lowers) each peer's flag in its own."""
    pads = signal_pads.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world_size):
        remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
        while tl.atomic_cas(remote + block * world_size + rank, 0, 1, sem="release",
                            scope="sys") != 0:  # fmt: skip
            pass
    local = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    for peer in tl.static_range(world_size):
        while tl.atomic_cas(local + block * world_size + peer, 1, 0, sem="acquire",
                            scope="sys") != 1:  # fmt: skip
            pass
    tl.debug_barrier()


@triton.jit
def one_shot_all_reduce_kernel(
    buffer_ptrs,
    signal_pads,
    out_ptr,
    numel,
    rank: tl.constexpr,
    world_size: tl.constexpr,
    BLOCK_SIZE: tl.constexpr,
):
    block = tl.program_id(0)
    _barrier(signal_pads, block, rank, world_size)
    buffers = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    for start in range(block * BLOCK_SIZE, numel, tl.num_programs(0) * BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < numel
        acc = tl.zeros((BLOCK_SIZE,), dtype=tl.float32)
        for peer in tl.static_range(world_size):
            buffer = tl.load(buffers + peer).to(tl.pointer_type(out_ptr.dtype.element_ty))
            acc += tl.load(buffer + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=mask)
    _barrier(signal_pads, block, rank, world_size)


_HANDLES: dict[tuple[int, torch.dtype, str], tuple[torch.Tensor, object]] = {}


def _symmetric(numel: int, dtype: torch.dtype, comm: Comm) -> tuple[torch.Tensor, object]:
    """A symmetric buffer of ``numel`` elements and its handle, made once per shape (the
    rendezvous is collective and slow)."""
    if comm.backend != "nccl":
        raise KernelUnsupported(
            f"the one-shot all-reduce needs CUDA GPUs with symmetric memory; this rank runs "
            f"{comm.backend} on {comm.device.type}"
        )
    try:
        from torch.distributed import _symmetric_memory as symm_mem
    except ImportError as exc:
        raise KernelUnsupported(f"this torch has no symmetric memory: {exc}") from exc
    key = (numel, dtype, str(comm.device))
    if key not in _HANDLES:
        buffer = symm_mem.empty(numel, dtype=dtype, device=comm.device)
        _HANDLES[key] = (buffer, symm_mem.rendezvous(buffer, dist.group.WORLD.group_name))
    return _HANDLES[key]


def _launch(t: Tensors, o: Tensors, p: Params, comm: Comm) -> LaunchConfig:
    x, out = t["x"], o["out"]
    buffer, handle = _symmetric(x.numel(), x.dtype, comm)
    buffer.copy_(x)
    blocks = max(1, min(MAX_BLOCKS, triton.cdiv(x.numel(), BLOCK)))
    one_shot_all_reduce_kernel[(blocks,)](
        handle.buffer_ptrs_dev,  # type: ignore[attr-defined]
        handle.signal_pad_ptrs_dev,  # type: ignore[attr-defined]
        out,
        x.numel(),
        rank=comm.rank,
        world_size=comm.size,
        BLOCK_SIZE=BLOCK,
        num_warps=8,
    )
    return LaunchConfig({"BLOCK_SIZE": BLOCK, "blocks": blocks}, num_warps=8, num_stages=1)


def _nccl(t: Tensors, p: Params, comm: Comm) -> dict[str, torch.Tensor]:
    out = t["x"].clone()
    dist.all_reduce(out, group=comm.group)
    return {"out": out}


def _inputs(
    p: Params, dtype: torch.dtype, device: torch.device, gen: torch.Generator, rank: int
) -> dict[str, torch.Tensor]:
    elem = torch.tensor([], dtype=dtype).element_size()
    return {"x": randn((max(1, int(p["bytes"]) // elem),), dtype, device, gen)}


def _reference(everyone: Sequence[Tensors], p: Params, rank: int) -> dict[str, torch.Tensor]:
    return {"out": torch.stack([t["x"] for t in everyone]).sum(0)}


# One-shot pays off below a few MB; beyond, NCCL's ring wins and the case says so.
_SIZES = tuple(8192 * 4**i for i in range(7))
ONE_SHOT_ALL_REDUCE = DistributedSpec(
    name="one_shot_all_reduce",
    summary="Triton one-shot all-reduce over symmetric memory (peer loads, signal-pad barrier).",
    make_inputs=_inputs,
    make_outputs=lambda t, p: {"out": torch.empty_like(t["x"])},
    launch=_launch,
    reference=_reference,
    collective="all_reduce",
    message_bytes=lambda p, elem: max(1, int(p["bytes"]) // elem) * elem,
    workloads={
        "smoke": ({"gpus_per_node": 2, "bytes": 264},),
        "llm": tuple({"gpus_per_node": n, "bytes": s} for n in (2, 4, 8) for s in _SIZES),
    },
    baseline=CommBaseline("torch.distributed.all_reduce (NCCL)", _nccl),
    dtypes=("fp32", "bf16"),
)
