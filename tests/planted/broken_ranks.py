"""A distributed suite whose second rank misbehaves: it sends the wrong chunk, hangs before
the collective, or crashes in it; a healthy all-reduce comes after them."""

import ctypes
import time

import torch
import torch.distributed as dist

from kernelwatch.harness.spec import DistributedSpec, Suite


def _launcher(fault):
    def launch(t, o, p, comm):
        x = t["x"]
        if comm.rank == 1 and fault == "wrong_chunk":
            x = x.roll(1)  # its own data, one element off
        if comm.rank == 1 and fault == "hangs":
            time.sleep(3600)
        if comm.rank == 1 and fault == "crashes":
            ctypes.string_at(0)
        dist.all_gather_into_tensor(o["out"], x.contiguous(), group=comm.group)

    return launch


def spec(fault):
    return DistributedSpec(
        name=fault,
        summary="all-gather with a planted fault on rank 1",
        make_inputs=lambda p, dtype, dev, gen, rank: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {"out": t["x"].new_empty(2 * int(p["n"]))},
        launch=_launcher(fault),
        reference=lambda everyone, p, rank: {"out": torch.cat([t["x"] for t in everyone])},
        collective="all_gather",
        message_bytes=lambda p, elem: 2 * int(p["n"]) * elem,
        workloads={"smoke": ({"gpus_per_node": 2, "n": 16},)},
        dtypes=("fp32",),
    )


SUITE = Suite(
    name="broken_ranks",
    kernels=tuple(spec(f) for f in ("wrong_chunk", "hangs", "crashes", "healthy")),
)
