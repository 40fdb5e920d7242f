"""A distributed suite over two nodes of two ranks whose second node misbehaves: an all-gather
that passes (on every rank, of either node, only if the rank runs without
the pod's secrets and not as root), then a rank of node 1 that writes a wrong result, one
that crashes and one that hangs."""

import ctypes
import os
import time

import torch
import torch.distributed as dist

from kernelwatch.harness.spec import DistributedSpec, Suite

TWO_BY_TWO = {"gpus_per_node": 2, "nodes": 2, "n": 16}
#: What the test puts in both nodes' environment, as a pod's secrets would be.
SECRET = "hunter2-multinode"


def _launcher(fault):
    def launch(t, o, p, comm):
        if any(SECRET in value for value in os.environ.values()):
            raise RuntimeError(f"rank {comm.rank} sees the pod's secrets")
        if os.geteuid() == 0:
            raise RuntimeError(f"rank {comm.rank} runs kernel code as root")
        if comm.rank == 2 and fault == "crashes_on_node1":
            ctypes.string_at(0)
        if comm.rank == 3 and fault == "hangs_on_node1":
            time.sleep(3600)
        dist.all_gather_into_tensor(o["out"], t["x"].contiguous(), group=comm.group)
        if comm.rank == 3 and fault == "wrong_on_node1":
            o["out"][0] += 1.0  # only this rank's result is off

    return launch


def spec(fault, workloads):
    return DistributedSpec(
        name=fault,
        summary="all-gather across two nodes, with a planted fault on node 1",
        make_inputs=lambda p, dtype, dev, gen, rank: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {
            "out": t["x"].new_empty(p["gpus_per_node"] * p["nodes"] * int(p["n"]))
        },
        launch=_launcher(fault),
        reference=lambda everyone, p, rank: {"out": torch.cat([t["x"] for t in everyone])},
        collective="all_gather",
        message_bytes=lambda p, elem: p["gpus_per_node"] * p["nodes"] * int(p["n"]) * elem,
        workloads={"smoke": workloads},
        dtypes=("fp32",),
    )


SUITE = Suite(
    name="multinode_ranks",
    kernels=(
        spec("all_gather", (TWO_BY_TWO,)),
        spec("wrong_on_node1", (TWO_BY_TWO,)),
        spec("crashes_on_node1", (TWO_BY_TWO,)),
        spec("hangs_on_node1", (TWO_BY_TWO,)),
    ),
)
