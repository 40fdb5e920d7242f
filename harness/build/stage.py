"""Build a suite for several targets in child processes and survive whatever the compilers do.

``run_build`` starts ``workers`` build children (``worker.py``) that each import the
suite, record its launches, and compile their share of the builds (task index modulo the
worker count), so compiles run in parallel and kernel code never runs in this process. When a
child dies or hangs in a compile, that build is recorded as an ``error`` with the child's
stderr tail and a fresh child resumes the rest of that worker's share.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernelwatch.harness.build.archs import DEFAULT_ARCHS
from kernelwatch.harness.child import (
    check_stopped,
    death,
    decode,
    kill,
    spawn,
    stop_requested,
    tail,
    wait,
)
from kernelwatch.harness.records import BuildMetrics
from kernelwatch.harness.suite import SuiteRef

#: The workload whose shapes decide the specialisation (a spec without it uses its first).
DEFAULT_WORKLOAD = "llm"


class BuildFailed(RuntimeError):
    """Nothing could be built: the suite does not import, or the build child cannot start."""


def default_workers() -> int:
    """One build child per core, up to 8 (each holds torch and Triton in memory)."""
    return max(1, min(8, os.cpu_count() or 1))


@dataclass(frozen=True)
class BuildRequest:
    """What to build, where the cache is (None: no cache) and how long a compile may take."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    archs: Sequence[str] = DEFAULT_ARCHS
    kernels: Sequence[str] = ()
    workload: str = DEFAULT_WORKLOAD
    dtypes: Sequence[str] = ()
    cache_dir: str | None = None
    workers: int = field(default_factory=default_workers)
    task_timeout_s: float = 600.0
    startup_timeout_s: float = 300.0

    def plan(self, worker: int, skip: set[int]) -> dict[str, Any]:
        return {
            "suite": self.suite.to_json(),
            "kernels": list(self.kernels),
            "workload": self.workload,
            "dtypes": list(self.dtypes),
            "archs": list(self.archs),
            "cache": self.cache_dir,
            "worker": worker,
            "workers": self.workers,
            "skip": sorted(skip),
        }


@dataclass(frozen=True)
class BuildResult:
    suite: str
    records: list[BuildMetrics]


def run_build(
    request: BuildRequest,
    on_plan: Callable[[int], None] | None = None,
    on_record: Callable[[BuildMetrics], None] | None = None,
) -> BuildResult:
    """Every build record of the request, in a deterministic order.

    Raises :class:`BuildFailed` (one line) when the suite cannot be loaded at all.
    ``on_plan(n)`` is called once with the number of builds, ``on_record`` per record.
    """
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    with tempfile.TemporaryDirectory(prefix="kernelwatch-triton-") as triton_cache:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        # Triton's own cache would skip ptxas and with it the spill report; ours is above it.
        env["TRITON_CACHE_DIR"] = triton_cache
        threads = [
            threading.Thread(target=_worker, args=(request, w, env, events), daemon=True)
            for w in range(request.workers)
        ]
        for thread in threads:
            thread.start()
        records: dict[int, BuildMetrics] = {}
        plans: set[tuple[str, int]] = set()
        fatal: str | None = None
        running = len(threads)
        while running:
            event = events.get()
            if event[0] == "done":
                running -= 1
            elif event[0] == "fatal":
                fatal = fatal or event[1]
            elif event[0] == "plan":
                if not plans and on_plan is not None:
                    on_plan(event[2])
                plans.add((event[1], event[2]))
            else:
                records[event[1]] = event[2]
                if on_record is not None:
                    on_record(event[2])
    check_stopped()  # the workers stopped on a stop signal: what was built is reported
    if fatal is not None:
        raise BuildFailed(fatal)
    if len(plans) != 1:
        raise BuildFailed(
            f"the build children disagree on the builds ({sorted(plans)}); is the suite "
            "deterministic?"
        )
    return BuildResult(plans.pop()[0], [records[i] for i in sorted(records)])


def _worker(
    request: BuildRequest, worker: int, env: dict[str, str], events: queue.Queue[tuple[Any, ...]]
) -> None:
    done: set[int] = set()
    try:
        while not stop_requested() and _run_child(request, worker, env, done, events):
            pass
    finally:
        events.put(("done",))


def _run_child(
    request: BuildRequest,
    worker: int,
    env: dict[str, str],
    done: set[int],
    events: queue.Queue[tuple[Any, ...]],
) -> bool:
    """One child process; True when it died in a build and a fresh one should resume."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, lines = spawn(
            "kernelwatch.harness.build.worker", request.plan(worker, done), stderr, env
        )
        current: tuple[int, dict[str, Any]] | None = None
        deadline = time.monotonic() + request.startup_timeout_s
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    kill(proc)
                    if current is None:
                        events.put(("fatal", _stalled(request, stderr)))
                        return False
                    reason = f"the compiler timed out after {request.task_timeout_s:.0f} s"
                    _fail(current, reason, tail(stderr), done, events)
                    return True
                event = decode(line) if line is not None else None
                if event is None:
                    if line is not None:
                        kill(proc)
                    code = wait(proc)
                    if stop_requested():  # killed by a stop signal: not the build's fault
                        return False
                    if current is not None:
                        reason = f"the build process {death(code)} while compiling"
                        _fail(current, reason, tail(stderr), done, events)
                        return True
                    if code != 0:
                        last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                        events.put(("fatal", f"the build runner {death(code)}: {last}"))
                    return False
                kind = event.get("event")
                if kind == "fatal":
                    events.put(("fatal", event["message"]))
                    return False
                if kind == "plan":
                    events.put(("plan", event["suite"], int(event["tasks"])))
                elif kind == "begin":
                    current = (int(event["task"]), event["record"])
                elif kind == "result":
                    index = int(event["task"])
                    done.add(index)
                    events.put(("record", index, BuildMetrics.from_json(event["record"])))
                    current = None
                deadline = time.monotonic() + request.task_timeout_s
        finally:
            kill(proc)


def _fail(
    current: tuple[int, dict[str, Any]],
    reason: str,
    stderr_tail: str,
    done: set[int],
    events: queue.Queue[tuple[Any, ...]],
) -> None:
    index, skeleton = current
    record = replace(BuildMetrics.from_json(skeleton), reason=reason, detail=stderr_tail)
    done.add(index)
    events.put(("record", index, record))


def _stalled(request: BuildRequest, stderr: Any) -> str:
    last = (tail(stderr).splitlines() or ["(no output)"])[-1]
    return (
        f"the build runner produced nothing for {request.startup_timeout_s:.0f} s while "
        f"loading the suite and recording its launches; last output: {last}"
    )
