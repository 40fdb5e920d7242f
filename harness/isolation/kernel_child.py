"""The kernel child, the process that runs a suite's kernels: ``python -m
kernelwatch.harness.isolation.kernel_child``.

Kernel code is imported only here, never in the platform's own process, so a segfault, a
hang or a corrupted CUDA context costs one case, not the run (see ``supervise.py``).

Protocol: a JSON plan on stdin's first line (with the key of the result channel); signed
JSON lines on stdout (``channel.py``), in order:
``{"event": "plan", "tasks": [...], "device": {...}, "software": {...}, "method": ...,
"families": {kernel: family}}``, then
per case ``{"event": "begin", "task": i}`` and ``{"event": "result", "task": i, "record": {...}}``.
The plan's ``mode`` is ``check`` (correctness records), ``bench`` (measurement records; the
plan event carries the timing method), ``ab`` (A/B records: the suite of checkout A, the
plan's ``suite``, and of checkout B, its ``suite_b``, imported side by side, each case timed
at both interleaved, in one process: only for distributed cases now), ``arm`` (one side of an
A/B pair, its plan's ``side`` ``A`` or ``B``: after the plan event, which also lists the
suite's ``distributed`` kernels, it answers one command a line on stdin, below) or
``selfcheck`` (no cases: ``progress`` events and one
``{"event": "stage", "name": "...", "data": {...}}`` per measurement as it finishes). A
bench child that measured ceilings says ``{"event": "carry", "key": "ceilings", "value":
{...}}``; the supervisor hands carried values to any fresh child of the same run in the
plan's ``carry``, so nothing is measured twice. A suite that fails to import, or a selection
it cannot satisfy, ends with
``{"event": "fatal", "kind": "suite" | "selection", "message": "..."}``.
Before starting the ranks of a distributed case (``distributed/ranks.py``) the runner says
``{"event": "starting"}``: the supervisor then allows the start-up time before the case's.

An ``arm`` child's commands (``harness/isolation/ab_sides.py`` sends them) and its one answer
to each:
``{"cmd": "lacks", "tasks": [...]}`` -> ``{"event": "lacks", "reasons": [str | null, ...]}``;
``{"cmd": "prepare", "task": {...}, "suite": name, "seed": n, "shared": {"config": {...},
"source": "autotune"} | null}`` -> ``{"event": "prepared", "config": {...}, "config_source":
"..."}``; ``{"cmd": "warm"}`` -> ``{"event": "warm", "resolution_ns": x}``;
``{"cmd": "sample", "n": n}`` -> ``{"event": "samples", "samples": [{...}, ...]}``;
``{"cmd": "finish", "stop": "..."}`` -> ``{"event": "result", "record": {...}}``. A command
that fails answers ``{"event": "failed", "status": "error" | "unsupported", "reason": "...",
"detail": "..."}``, after which a child on a GPU exits with ``EXIT_RESTART``. End of stdin
ends the child.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import IO, TYPE_CHECKING, Any

from kernelwatch.harness.isolation.jail import loopback_up
from kernelwatch.harness.isolation.quick_exit import quick_exit
from kernelwatch.harness.records import (
    ABMeasurement,
    CorrectnessResult,
    Measurement,
    in_family,
)

if TYPE_CHECKING:  # kernel-side modules are imported only after the device is chosen
    from kernelwatch.harness.device import Device
    from kernelwatch.harness.distributed.ranks import Ranks
    from kernelwatch.harness.records import SoftwareInfo
    from kernelwatch.harness.spec import Suite
    from kernelwatch.harness.suite import Loaded, Task
    from kernelwatch.harness.timing.ab import ABArm
    from kernelwatch.harness.timing.case import BenchSession

    RunCase = Callable[[Task], CorrectnessResult | Measurement | ABMeasurement]

Emit = Callable[[dict[str, Any]], None]

#: Exit code asking the supervisor for a fresh process (after a CUDA error, the context is
#: unusable for every later case).
EXIT_RESTART = 75
EXIT_FATAL = 3


def main() -> int:
    """Run the plan read from stdin; see the module docstring for the protocol."""
    emit, plan = open_channel()
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr tail
    # In a user namespace of its own (a worker that is not root) the runner may bring up its
    # namespace's loopback itself; as root the jail did it, and elsewhere it is up already.
    with contextlib.suppress(OSError):
        loopback_up()
    mode = plan.get("mode", "check")
    # An A/B side: both sides on one CPU (ab_sides.shared_cpu), before any kernel code runs.
    if plan.get("cpus"):
        os.sched_setaffinity(0, plan["cpus"])

    from kernelwatch.harness.device import select_device

    device = select_device()  # before the suite imports Triton

    if mode == "arm":
        return _arm(plan, device, emit)

    from kernelwatch.harness.device import software_info
    from kernelwatch.harness.suite import SelectionError, SuiteLoadError

    try:
        loaded = load_suites(plan)
        suites = [one.suite for one in loaded]
        suite = suites[0]
        if mode == "selfcheck":
            _selfcheck(plan, suite, device, emit)
            return 0
        tasks = _select(plan, suites)
    except SuiteLoadError as exc:
        emit({"event": "fatal", "kind": "suite", "message": str(exc)})
        return EXIT_FATAL
    except SelectionError as exc:
        emit({"event": "fatal", "kind": "selection", "message": str(exc)})
        return EXIT_FATAL
    # Each side's records name the suite file and revision it imported.
    software = [software_info(one.source) for one in loaded]
    from kernelwatch.harness.distributed.ranks import Ranks

    ranks = Ranks(plan, device.info, software[0], starting=lambda: emit({"event": "starting"}))
    ranks.size = _largest_world(suites, tasks, ranks)
    run_case, method = _case_runner(plan, suites, device, software, emit, ranks)
    if run_case is None:
        return EXIT_FATAL
    # Each record names its kernel's family as the spec declares it (in ab mode, B's: the
    # head's declaration), whichever stage made it.
    families = {spec.name: spec.family for s in reversed(suites) for spec in s.kernels}
    emit(
        {
            "event": "plan",
            "suite": suite.name,
            "tasks": [t.to_json() for t in tasks],
            "device": asdict(device.info),
            "software": asdict(software[0]),
            "method": method,
            "families": families,
        }
    )
    try:
        for index in range(int(plan.get("start", 0)), len(tasks)):
            task = tasks[index]
            emit({"event": "begin", "task": index})
            record = in_family(run_case(task), families[task.kernel])
            emit({"event": "result", "task": index, "record": record.to_json()})
            outcome = record.verdict if isinstance(record, CorrectnessResult) else record.status
            if outcome == "error" and device.info.kind == "cuda":
                return EXIT_RESTART
    finally:
        ranks.close()
    return 0


def _selfcheck(plan: dict[str, Any], suite: Suite, device: Device, emit: Emit) -> None:
    """The self-check's measurements, one ``stage`` event each as it finishes."""
    from kernelwatch.harness.device import software_info
    from kernelwatch.harness.selfcheck.measure import (
        SelfcheckOptions,
        device_tools,
        run_measurements,
    )
    from kernelwatch.harness.timing.telemetry import open_probe

    options = SelfcheckOptions.from_json(plan["selfcheck"])
    probe = open_probe(device.info.uuid if device.info.kind == "cuda" else None)
    run_measurements(
        suite,
        device,
        software_info(),
        options,
        device_tools(device, probe),
        lambda name, data: emit({"event": "stage", "name": name, "data": finite(data)}),
        lambda message: emit({"event": "progress", "message": message}),
    )


def finite(data: Any) -> Any:
    """``data`` with every NaN or infinity replaced by None: strict JSON has neither."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {key: finite(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [finite(value) for value in data]
    return data


def _largest_world(suites: list[Suite], tasks: list[Task], ranks: Ranks) -> int:
    """The most ranks a selected single-node distributed case this device can host needs
    (a world across nodes has ranks of its own)."""
    from kernelwatch.harness.spec import DistributedSpec, World

    sizes = [0]
    for task in tasks:
        specs = [s.kernel(task.kernel) for s in suites if task.kernel in s.names]
        if any(isinstance(spec, DistributedSpec) for spec in specs):
            world = World.of(task.params)
            sizes += [] if ranks.lacking(world) or world.nodes > 1 else [world.size]
    return max(sizes)


def load_suites(plan: dict[str, Any]) -> list[Loaded]:
    """The plan's suite, and in ``ab`` mode B's beside it (A's checkout forgotten first, so
    both may use the same package names). Raises SuiteLoadError naming the side."""
    from kernelwatch.harness.suite import (
        SuiteLoadError,
        SuiteRef,
        import_suite,
        load_suite_isolated,
    )

    if plan.get("mode") != "ab":
        return [import_suite(SuiteRef.from_json(plan["suite"]))]
    suites = []
    for side, load, data in (
        ("A", load_suite_isolated, plan["suite"]),
        ("B", import_suite, plan["suite_b"]),
    ):
        ref = SuiteRef.from_json(data)
        try:
            suites.append(load(ref))
        except SuiteLoadError as exc:
            raise SuiteLoadError(f"side {side} ({ref.root or ref.target}): {exc}") from exc
    return suites


def _select(plan: dict[str, Any], suites: list[Suite]) -> list[Task]:
    """The cases the plan selects on the first suite; in ``ab`` mode followed by the cases
    only B's suite has (they are reported unsupported: there is nothing to compare)."""
    from kernelwatch.harness.suite import SelectionError, lacks, select_tasks

    selection = (plan["kernels"], plan["workload"], plan["dtypes"], plan.get("cases_per_kernel", 0),
                 plan.get("params", ()))  # fmt: skip
    tasks = select_tasks(suites[0], *selection)
    if len(suites) > 1:
        # When B cannot satisfy the selection at all, every case is A's, reported as B lacking it.
        with contextlib.suppress(SelectionError):
            tasks += [t for t in select_tasks(suites[1], *selection) if lacks(suites[0], t)]
    return tasks


def _case_runner(
    plan: dict[str, Any],
    suites: list[Suite],
    device: Device,
    sides: list[SoftwareInfo],
    emit: Emit,
    ranks: Ranks,
) -> tuple[RunCase | None, dict[str, Any] | None]:
    """The function that turns one task into a record, for the plan's mode, and the timing
    method (bench, ab) as JSON. (None, None) after emitting a fatal event for a bad request.
    ``sides`` is the software of each suite (A and B in ``ab`` mode); a distributed case goes
    to its world's ``ranks``."""
    from kernelwatch.harness.spec import DistributedSpec

    seed = int(plan["seed"])
    software = sides[0]
    suite = suites[0]
    mode = plan.get("mode", "check")
    if mode == "check":
        from kernelwatch.harness.correctness import check_case
        from kernelwatch.harness.timing.pinning import pinned_config, pins_from_json

        pins = pins_from_json(plan.get("pins", {}))
        autotune = plan.get("autotune", True)

        def check(task: Task) -> CorrectnessResult:
            spec = suite.kernel(task.kernel)
            if isinstance(spec, DistributedSpec):
                return ranks.run("check", task, suite.name)  # type: ignore[return-value]
            pin = pinned_config(pins, task.kernel, task.params, task.dtype)
            return check_case(
                spec,
                suite.name,
                task.workload,
                task.params,
                task.dtype,
                device,
                seed,
                software,
                pin if pin is not None or autotune else spec.pinned_config,
            )

        return check, None
    session = _open_session(plan, device, software, emit)
    if session is None:
        return None, None
    ranks.method = session.method
    if mode == "ab":
        return _ab_runner(session, suites, sides, seed, ranks), asdict(session.method)

    def bench(task: Task) -> Measurement:
        spec = suite.kernel(task.kernel)
        if isinstance(spec, DistributedSpec):
            return ranks.run("bench", task, suite.name)  # type: ignore[return-value]
        return session.measure(spec, suite.name, task.workload, task.params, task.dtype, seed)

    return bench, asdict(session.method)


def _open_session(
    plan: dict[str, Any], device: Device, software: SoftwareInfo, emit: Emit, siblings: int = 0
) -> BenchSession | None:
    """The timing session of a bench or ab plan, using ceilings an earlier child of the same
    run measured; None after emitting a fatal event for a timer the device cannot do.
    ``siblings``: processes of this run that share the GPU (an A/B pair's other side)."""
    from kernelwatch.harness.timing.ab import ABSession
    from kernelwatch.harness.timing.case import BenchSession
    from kernelwatch.harness.timing.request import BenchOptions
    from kernelwatch.harness.timing.roofline import Ceilings

    options = BenchOptions.from_json(plan["bench"])
    carried = plan.get("carry", {}).get("ceilings")
    if carried:
        options = replace(options, ceilings=Ceilings(**carried))
    kind = ABSession if plan.get("mode") == "ab" else BenchSession
    try:
        session = kind.open(device, options, software, siblings)
    except ValueError as exc:
        emit({"event": "fatal", "kind": "selection", "message": str(exc)})
        return None
    if session.ceilings is not None and not carried:
        emit({"event": "carry", "key": "ceilings", "value": asdict(session.ceilings)})
    return session


def _ab_runner(
    session: BenchSession, suites: list[Suite], sides: list[SoftwareInfo], seed: int, ranks: Ranks
) -> RunCase:
    from kernelwatch.harness.spec import DistributedSpec
    from kernelwatch.harness.suite import lacks
    from kernelwatch.harness.timing.ab import ABSession

    assert isinstance(session, ABSession)
    a, b = suites

    def ab(task: Task) -> ABMeasurement:
        lacking = [f"{side} {why}" for side, s in (("A", a), ("B", b)) if (why := lacks(s, task))]
        if lacking:
            return session.unsupported(a.name, task, "; ".join(lacking))
        distributed = [isinstance(s.kernel(task.kernel), DistributedSpec) for s in (a, b)]
        if all(distributed):
            return ranks.run("ab", task, a.name)  # type: ignore[return-value]
        if any(distributed):
            return session.unsupported(
                a.name, task, f"one side declares {task.kernel!r} distributed, the other not"
            )
        return session.measure_pair(
            a.kernel(task.kernel), b.kernel(task.kernel), a.name, task, seed, (sides[0], sides[1])
        )

    return ab


def _arm(plan: dict[str, Any], device: Device, emit: Emit) -> int:
    """One side of an A/B pair: import its suite alone, say the plan, then answer the
    parent's commands (module docstring) until stdin ends."""
    from kernelwatch.harness.device import software_info
    from kernelwatch.harness.spec import DistributedSpec
    from kernelwatch.harness.suite import (
        SelectionError,
        SuiteLoadError,
        SuiteRef,
        import_suite,
        select_tasks,
    )
    from kernelwatch.harness.timing.ab import ABArm, ABSession

    side = plan["side"]
    ref = SuiteRef.from_json(plan["suite"])
    try:
        loaded = import_suite(ref)
    except SuiteLoadError as exc:
        message = f"side {side} ({ref.root or ref.target}): {exc}"
        emit({"event": "fatal", "kind": "suite", "message": message})
        return EXIT_FATAL
    suite = loaded.suite
    selection = (plan["kernels"], plan["workload"], plan["dtypes"], plan.get("cases_per_kernel", 0),
                 plan.get("params", ()))  # fmt: skip
    try:
        tasks = select_tasks(suite, *selection)
    except SelectionError as exc:
        # B that cannot satisfy the selection at all: every case is A's, which B lacks.
        if side != "A":
            tasks = []
        else:
            emit({"event": "fatal", "kind": "selection", "message": str(exc)})
            return EXIT_FATAL
    software = software_info(loaded.source)
    session = _open_session({**plan, "mode": "ab"}, device, software, emit, siblings=1)
    if session is None:
        return EXIT_FATAL
    assert isinstance(session, ABSession)
    emit(
        {
            "event": "plan",
            "suite": suite.name,
            "tasks": [t.to_json() for t in tasks],
            "device": asdict(device.info),
            "software": asdict(software),
            "method": asdict(session.method),
            "families": {spec.name: spec.family for spec in suite.kernels},
            "distributed": [s.name for s in suite.kernels if isinstance(s, DistributedSpec)],
        }
    )
    arm = ABArm(session, side)
    for line in sys.stdin:
        command = json.loads(line)
        try:
            emit(_arm_answer(arm, suite, command))
        except Exception as exc:  # a kernel's failure is the case's record, not the child's end
            emit(_arm_failure(side, command.get("cmd"), exc))
            if device.info.kind == "cuda":
                return EXIT_RESTART  # the CUDA context may be unusable for every later case
    return 0


def _arm_answer(arm: ABArm, suite: Suite, command: dict[str, Any]) -> dict[str, Any]:
    """The answer of an ``arm`` child to one command."""
    from kernelwatch.harness.records import LaunchConfig
    from kernelwatch.harness.suite import Task, lacks

    kind = command["cmd"]
    if kind == "lacks":
        reasons = [lacks(suite, Task.from_json(t)) for t in command["tasks"]]
        return {"event": "lacks", "reasons": reasons}
    if kind == "prepare":
        task = Task.from_json(command["task"])
        shared = command.get("shared")
        prepared = arm.prepare(
            suite.kernel(task.kernel),
            command["suite"],
            task,
            int(command["seed"]),
            LaunchConfig.from_json(shared["config"]) if shared else None,
            shared["source"] if shared else "",
        )
        config = asdict(prepared.config)
        return {"event": "prepared", "config": config, "config_source": prepared.config_source}
    if kind == "warm":
        return {"event": "warm", "resolution_ns": arm.warm()}
    if kind == "sample":
        samples = arm.sample(int(command["n"]))
        return {"event": "samples", "samples": [finite(asdict(one)) for one in samples]}
    if kind == "finish":
        return {"event": "result", "record": arm.finish(command["stop"]).to_json()}
    raise ValueError(f"unknown command {kind!r}")


def _arm_failure(side: str, command: str | None, exc: BaseException) -> dict[str, Any]:
    """The ``failed`` answer of a command that raised: unsupported for KernelUnsupported, an
    error naming the side (and, for sampling, the stage) otherwise."""
    import traceback

    from kernelwatch.harness.spec import KernelUnsupported

    message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    stage = side if command == "prepare" else f"{side} timing"
    if isinstance(exc, KernelUnsupported):
        reason = str(exc) if str(exc).startswith("unsupported on ") else f"{side}: {exc}"
        return {"event": "failed", "status": "unsupported", "reason": reason, "detail": ""}
    return {
        "event": "failed",
        "status": "error",
        "reason": f"{stage}: {message}"[:500],
        "detail": "".join(traceback.format_exc(limit=8))[-4000:],
    }


def open_channel() -> tuple[Emit, dict[str, Any]]:
    """The signed writer of the result channel and the plan, before any kernel code runs:
    this process made non-dumpable, the plan (and its channel key) read from stdin's first
    line, fd 1 kept for the channel and anything kernel code prints sent to stderr."""
    from kernelwatch.harness.isolation.channel import Writer, protect_process

    protect_process()
    plan = json.loads(sys.stdin.readline())
    writer = Writer(private_stdout(), plan.pop("key"))
    return writer.send, plan


def private_stdout() -> IO[str]:
    """Keep fd 1 for the protocol and send anything kernel code prints to stderr instead."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


if __name__ == "__main__":
    quick_exit(main())
