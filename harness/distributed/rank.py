"""One rank of a distributed case: ``python -m kernelwatch.harness.distributed.rank``.

Started by the kernel child's :class:`~kernelwatch.harness.distributed.ranks.Ranks`, as
many as the plan's largest world, and kept for every case: a smaller world's case runs on
the first ranks, in process groups of their own, while the others answer at once.

Protocol, JSON lines: the first line on stdin says who the rank is (``rank``,
``local_rank``, ``world``, ``init_method``, ``join_timeout_s`` (the start-up allowance),
``timeout_s`` (the collectives'), and the runner's ``plan``: the
suites to import, the seed, the bench options); the rank joins the process group and
answers ``{"event": "ready"}``. Then one command per line
(``{"op": "check" | "bench" | "ab", "task": {...}}``, or ``{"op": "exit"}``), each answered
by ``step`` events and one of ``{"event": "done", "record": ... | null}`` (rank 0 carries
the record), ``{"event": "unsupported", "message"}`` or ``{"event": "error", "message",
"detail", "comm": bool}`` (``comm``: a collective failed because another rank did).
Anything the kernels print goes to stderr.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import re
import sys
import traceback
from collections.abc import Callable
from typing import Any

from kernelwatch.harness.isolation.quick_exit import quick_exit

#: Messages of a collective that failed because of another rank (gloo, NCCL's watchdog).
PEER_FAILURE = re.compile(
    r"timed out|connection closed by peer|connection reset|broken pipe|watchdog|"
    r"remote (worker|peer|process)",
    re.IGNORECASE,
)


def main() -> int:
    """Join the world, then run commands until ``exit`` or the end of stdin."""
    from kernelwatch.harness.isolation.kernel_child import private_stdout

    protocol = private_stdout()
    faulthandler.enable()

    def emit(event: dict[str, Any]) -> None:
        protocol.write(json.dumps(event, allow_nan=False) + "\n")
        protocol.flush()

    hello = json.loads(sys.stdin.readline())
    from kernelwatch.harness.device import select_device

    device = select_device()  # before a suite imports Triton
    try:
        state = _join(hello, device)
    except Exception as exc:  # the world never formed: the coordinator reports it
        emit({"event": "error", "message": _one_line(exc), "detail": _trace(), "comm": False})
        return 3
    emit({"event": "ready"})
    for line in sys.stdin:
        command = json.loads(line)
        if command["op"] == "exit":
            break
        emit(_run(command, state, lambda s: emit({"event": "step", "step": s})))
    return 0


def _join(hello: dict[str, Any], device: Any) -> dict[str, Any]:
    """Join the process group, import the suites and describe this rank to the others."""
    import torch
    import torch.distributed as dist

    from kernelwatch.harness.device import software_info
    from kernelwatch.harness.distributed.rank_case import Timing
    from kernelwatch.harness.distributed.world import rank_info
    from kernelwatch.harness.isolation.kernel_child import load_suites
    from kernelwatch.harness.spec import World
    from kernelwatch.harness.timing.request import BenchOptions
    from kernelwatch.harness.timing.telemetry import NullProbe, open_probe
    from kernelwatch.harness.timing.timers import make_timer

    world = World(**hello["world"])
    rank, local_rank = int(hello["rank"]), int(hello["local_rank"])
    cuda = device.info.kind == "cuda"
    if cuda:
        torch.cuda.set_device(local_rank)
    where = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    timeout = datetime.timedelta(seconds=float(hello["timeout_s"]))
    # Ranks finish starting far apart (torch's import on a busy host, another node's pod):
    # they meet in the store within the start-up allowance, so that the collectives' shorter
    # timeout only ever waits on a rank that is already up.
    join = datetime.timedelta(seconds=float(hello["join_timeout_s"]))
    store, _, _ = next(dist.rendezvous(hello["init_method"], rank, world.size, timeout=join))
    store.set_timeout(join)
    store.set(f"kw-joined-{rank}", "1")
    store.wait([f"kw-joined-{r}" for r in range(world.size)])
    dist.init_process_group(
        "nccl" if cuda else "gloo", store=store, rank=rank, world_size=world.size,
        timeout=timeout,
    )  # fmt: skip
    loaded = load_suites(hello["plan"])
    suites = [one.suite for one in loaded]
    me = rank_info(rank, str(where))
    everyone: list[Any] = [None] * world.size
    state = {
        "suites": suites, "plan": hello["plan"], "device": device, "where": where,
        "everyone": everyone, "rank": rank, "world": world, "timeout": timeout, "contexts": {},
    }  # fmt: skip
    dist.all_gather_object(everyone, me, group=_groups(state, world.size)[1])
    timing = None
    if "bench" in hello["plan"]:
        options = BenchOptions.from_json(hello["plan"]["bench"])
        probe = open_probe(me.uuid) if me.uuid else NullProbe()
        timer = make_timer(
            device.info.kind, options.timer, options.l2, device.info.l2_bytes,
            probe.max_sm_clock_mhz,
        )  # fmt: skip
        timing = Timing(timer, probe, options.resolved(device.info.kind), options.baseline)
    return {**state, "timing": timing, "software": software_info(loaded[0].source)}


def _groups(state: dict[str, Any], size: int) -> tuple[Any, Any]:
    """The measured backend's group of the first ``size`` ranks, and the gloo group the
    harness talks through beside it; made once per size, by every rank, as ``new_group``
    requires."""
    import torch.distributed as dist

    if size not in state["contexts"]:
        members = list(range(size))
        whole = size == state["world"].size
        group = dist.group.WORLD if whole else dist.new_group(members)
        cuda = state["device"].info.kind == "cuda"
        timeout = state["timeout"]
        control = dist.new_group(members, backend="gloo", timeout=timeout) if cuda else group
        state["contexts"][size] = (group, control)
    return state["contexts"][size]


def _context(state: dict[str, Any], world: Any) -> Any:
    """This rank's context for a case of ``world`` (the first ``world.size`` ranks), or
    None for a rank the case does not use."""
    from kernelwatch.harness.distributed.rank_case import RankContext
    from kernelwatch.harness.distributed.world import local_links, world_info
    from kernelwatch.harness.spec import Comm

    size, cuda = world.size, state["device"].info.kind == "cuda"
    group, control = _groups(state, size)
    rank = state["rank"]
    if rank >= size:
        return None
    links = local_links(range(world.gpus_per_node)) if cuda and rank == 0 else ""
    backend = "nccl" if cuda else "gloo"
    info = world_info(backend, world, state["everyone"][:size], links, os.environ)
    comm = Comm(rank, world, state["where"], group, backend)
    return RankContext(comm, control, state["device"], info, state["software"])


def _run(
    command: dict[str, Any], state: dict[str, Any], step: Callable[[str], None]
) -> dict[str, Any]:
    """One command: the event that ends it."""
    from kernelwatch.harness.distributed import rank_case
    from kernelwatch.harness.records import CaseId
    from kernelwatch.harness.spec import KernelUnsupported, World
    from kernelwatch.harness.suite import Task

    task = Task.from_json(command["task"])
    plan, timing, suites = state["plan"], state["timing"], state["suites"]
    seed = int(plan["seed"])
    case = CaseId(suites[0].name, task.kernel, task.workload, dict(task.params), task.dtype)
    try:
        ctx = _context(state, World.of(task.params))
        if ctx is None:
            return {"event": "done", "record": None}
        common = {
            "case": case,
            "method": timing.timer.method if timing else None,
            "device": ctx.device.info,
            "software": ctx.software,
        }
        spec = suites[0].kernel(task.kernel)
        if command["op"] == "check":
            record = rank_case.check(spec, case, task.tolerance, seed, ctx, step)
        elif command["op"] == "bench":
            record = rank_case.bench(spec, case, seed, ctx, timing, common, step)
        else:
            other = suites[1].kernel(task.kernel)
            record = rank_case.ab(spec, other, case, seed, ctx, timing, common, step)
    except KernelUnsupported as exc:
        return {"event": "unsupported", "message": str(exc)}
    except Exception as exc:  # the case's failure, reported against this rank
        message = _one_line(exc)
        return {
            "event": "error",
            "message": message,
            "detail": _trace(),
            "comm": bool(PEER_FAILURE.search(message)),
        }
    return {"event": "done", "record": record.to_json() if record is not None else None}


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:500]


def _trace() -> str:
    return "".join(traceback.format_exc(limit=8))[-4000:]


if __name__ == "__main__":
    quick_exit(main())
