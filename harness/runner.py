"""The child process that runs a suite's kernels: ``python -m kernelwatch.harness.runner``.

Kernel code is imported only here, never in the platform's own process, so a segfault, a
hang or a corrupted CUDA context costs one case, not the run (see ``supervise.py``).

Protocol: a JSON plan on stdin; JSON lines on stdout, in order:
``{"event": "plan", "tasks": [...], "device": {...}, "software": {...}}``, then per case
``{"event": "begin", "task": i}`` and ``{"event": "result", "task": i, "record": {...}}``.
A suite that fails to import, or a selection it cannot satisfy, ends with
``{"event": "fatal", "kind": "suite" | "selection", "message": "..."}``.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
from dataclasses import asdict
from typing import IO, Any

#: Exit code asking the supervisor for a fresh process (after a CUDA error, the context is
#: unusable for every later case).
EXIT_RESTART = 75
EXIT_FATAL = 3


def main() -> int:
    """Run the plan read from stdin; see the module docstring for the protocol."""
    protocol = _private_stdout()
    faulthandler.enable()  # a segfault leaves a Python traceback in the stderr tail
    plan = json.load(sys.stdin)

    from kernelwatch.harness.device import select_device

    device = select_device()  # before the suite imports Triton

    from kernelwatch.harness.correctness import check_case
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
        tasks = select_tasks(suite, plan["kernels"], plan["workload"], plan["dtypes"])
    except SuiteLoadError as exc:
        emit({"event": "fatal", "kind": "suite", "message": str(exc)})
        return EXIT_FATAL
    except SelectionError as exc:
        emit({"event": "fatal", "kind": "selection", "message": str(exc)})
        return EXIT_FATAL
    software = software_info()
    emit(
        {
            "event": "plan",
            "suite": suite.name,
            "tasks": [t.to_json() for t in tasks],
            "device": asdict(device.info),
            "software": asdict(software),
        }
    )
    for index in range(int(plan.get("start", 0)), len(tasks)):
        task = tasks[index]
        emit({"event": "begin", "task": index})
        result = check_case(
            suite.kernel(task.kernel),
            suite.name,
            task.workload,
            task.params,
            task.dtype,
            device,
            seed=int(plan["seed"]),
            software=software,
        )
        emit({"event": "result", "task": index, "record": result.to_json()})
        if result.verdict == "error" and device.info.kind == "cuda":
            return EXIT_RESTART
    return 0


def _private_stdout() -> IO[str]:
    """Keep fd 1 for the protocol and send anything kernel code prints to stderr instead."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return protocol


if __name__ == "__main__":
    sys.exit(main())
