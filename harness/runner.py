"""The child process that runs a suite's kernels: ``python -m kernelwatch.harness.runner``.

Kernel code is imported only here, never in the platform's own process, so a segfault, a
hang or a corrupted CUDA context costs one case, not the run (see ``supervise.py``).

Protocol: a JSON plan on stdin; JSON lines on stdout, in order:
``{"event": "plan", "tasks": [...], "device": {...}, "software": {...}, "method": ...}``, then
per case ``{"event": "begin", "task": i}`` and ``{"event": "result", "task": i, "record": {...}}``.
The plan's ``mode`` is ``check`` (correctness records), ``bench`` (measurement records; the
plan event carries the timing method) or ``selfcheck`` (no cases: ``progress`` events, then
one ``{"event": "report", "markdown": "..."}``). A bench child that measured ceilings says
``{"event": "carry", "key": "ceilings", "value": {...}}``; the supervisor hands carried
values to any fresh child of the same run in the plan's ``carry``, so nothing is measured
twice. A suite that fails to import, or a selection it cannot satisfy, ends with
``{"event": "fatal", "kind": "suite" | "selection", "message": "..."}``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from collections.abc import Callable
from dataclasses import asdict, replace
from typing import IO, TYPE_CHECKING, Any

from kernelwatch.harness.records import CorrectnessResult, Measurement

if TYPE_CHECKING:  # kernel-side modules are imported only after the device is chosen
    from kernelwatch.harness.device import Device
    from kernelwatch.harness.records import SoftwareInfo
    from kernelwatch.harness.spec import KernelSpec
    from kernelwatch.harness.suite import Task

    RunCase = Callable[[KernelSpec, str, Task], CorrectnessResult | Measurement]
    Emit = Callable[[dict[str, Any]], None]

#: Exit code asking the supervisor for a fresh process (after a CUDA error, the context is
#: unusable for every later case).
EXIT_RESTART = 75
EXIT_FATAL = 3


def main() -> int:
    """Run the plan read from stdin; see the module docstring for the protocol."""
    protocol = private_stdout()
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr tail
    plan = json.load(sys.stdin)
    mode = plan.get("mode", "check")

    from kernelwatch.harness.device import select_device

    device = select_device()  # before the suite imports Triton

    from kernelwatch.harness.device import software_info
    from kernelwatch.harness.suite import (
        SelectionError,
        SuiteLoadError,
        SuiteRef,
        load_suite,
        select_tasks,
    )

    def emit(event: dict[str, Any]) -> None:
        protocol.write(json.dumps(event, allow_nan=False) + "\n")
        protocol.flush()

    try:
        suite = load_suite(SuiteRef.from_json(plan["suite"]))
        if mode == "selfcheck":
            from kernelwatch.harness.selfcheck import SelfcheckOptions, run_selfcheck

            options = SelfcheckOptions.from_json(plan["selfcheck"])
            report = run_selfcheck(
                suite, device, options, lambda m: emit({"event": "progress", "message": m})
            )
            emit({"event": "report", "markdown": report})
            return 0
        tasks = select_tasks(suite, plan["kernels"], plan["workload"], plan["dtypes"])
    except SuiteLoadError as exc:
        emit({"event": "fatal", "kind": "suite", "message": str(exc)})
        return EXIT_FATAL
    except SelectionError as exc:
        emit({"event": "fatal", "kind": "selection", "message": str(exc)})
        return EXIT_FATAL
    software = software_info()
    run_case, method = _case_runner(plan, device, software, emit)
    if run_case is None:
        return EXIT_FATAL
    emit(
        {
            "event": "plan",
            "suite": suite.name,
            "tasks": [t.to_json() for t in tasks],
            "device": asdict(device.info),
            "software": asdict(software),
            "method": method,
        }
    )
    for index in range(int(plan.get("start", 0)), len(tasks)):
        task = tasks[index]
        emit({"event": "begin", "task": index})
        record = run_case(suite.kernel(task.kernel), suite.name, task)
        emit({"event": "result", "task": index, "record": record.to_json()})
        outcome = record.verdict if isinstance(record, CorrectnessResult) else record.status
        if outcome == "error" and device.info.kind == "cuda":
            return EXIT_RESTART
    return 0


def _case_runner(
    plan: dict[str, Any], device: Device, software: SoftwareInfo, emit: Emit
) -> tuple[RunCase | None, dict[str, Any] | None]:
    """The function that turns one task into a record, for the plan's mode, and the timing
    method (bench) as JSON. (None, None) after emitting a fatal event for a bad request."""
    seed = int(plan["seed"])
    if plan.get("mode", "check") == "check":
        from kernelwatch.harness.correctness import check_case

        def check(spec: KernelSpec, suite: str, task: Task) -> CorrectnessResult:
            return check_case(
                spec, suite, task.workload, task.params, task.dtype, device, seed, software
            )

        return check, None
    from kernelwatch.harness.bench import BenchSession
    from kernelwatch.harness.options import BenchOptions
    from kernelwatch.harness.sol import Ceilings

    options = BenchOptions.from_json(plan["bench"])
    carried = plan.get("carry", {}).get("ceilings")
    if carried:
        options = replace(options, ceilings=Ceilings(**carried))
    try:
        session = BenchSession.open(device, options, software)
    except ValueError as exc:
        emit({"event": "fatal", "kind": "selection", "message": str(exc)})
        return None, None
    if session.ceilings is not None and not carried:
        emit({"event": "carry", "key": "ceilings", "value": asdict(session.ceilings)})

    def bench(spec: KernelSpec, suite: str, task: Task) -> Measurement:
        return session.measure(spec, suite, task.workload, task.params, task.dtype, seed)

    return bench, asdict(session.method)


def private_stdout() -> IO[str]:
    """Keep fd 1 for the protocol and send anything kernel code prints to stderr instead."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


if __name__ == "__main__":
    sys.exit(main())
