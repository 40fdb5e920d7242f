"""Build a suite for several targets in child processes and survive whatever the compilers do.

``run_build`` starts ``workers`` build children (``worker.py``) that each import the
suite, record its launches, and compile their share of the builds (task index modulo the
worker count), so compiles run in parallel and kernel code never runs in this process. When a
child dies or hangs in a compile, that build is recorded as an ``error`` with the child's
stderr tail and a fresh child resumes the rest of that worker's share.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kernelwatch.harness.build import memo
from kernelwatch.harness.build.archs import DEFAULT_ARCHS
from kernelwatch.harness.build.cache import BuildCache
from kernelwatch.harness.isolation.child import (
    check_stopped,
    death,
    kill,
    spawn,
    stop_requested,
    tail,
    wait,
)
from kernelwatch.harness.isolation.sandbox import Sandbox, sandbox
from kernelwatch.harness.records import BuildMetrics, CaseRecipe, RecordError
from kernelwatch.harness.suite import SuiteRef

#: The workload whose shapes decide the specialisation (a spec without it uses its first).
DEFAULT_WORKLOAD = "llm"


class BuildFailed(RuntimeError):
    """Nothing could be built: the suite does not import, or the build child cannot start."""


#: The build children of a stage whose caller names no number: a host that runs several
#: stages or other jobs at once (a CI runner beside its test workers, a shared Prefect
#: worker) sets fewer, since each child costs a torch import (3 s of CPU) before it compiles.
WORKERS_ENV = "KERNELWATCH_BUILD_WORKERS"
#: The most build children a stage starts by default (each holds torch and Triton in memory).
MAX_WORKERS = 8


def default_workers() -> int:
    """``$KERNELWATCH_BUILD_WORKERS``, else one build child per core, up to :data:`MAX_WORKERS`.
    ValueError (one line) when the variable is not a count."""
    value = os.environ.get(WORKERS_ENV, "").strip()
    if not value:
        return max(1, min(MAX_WORKERS, os.cpu_count() or 1))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"{WORKERS_ENV} must be a whole number of build children (at least 1), not {value!r}"
        )
    return int(value)


@dataclass(frozen=True)
class BuildRequest:
    """What to build, where the cache is (None: no cache), whether this run may add to it
    (False for code nobody has reviewed: a pull request's builds read the cache but never
    write it) and how long a compile may take."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    archs: Sequence[str] = DEFAULT_ARCHS
    kernels: Sequence[str] = ()
    workload: str = DEFAULT_WORKLOAD
    dtypes: Sequence[str] = ()
    every_dtype: bool = False
    cache_dir: str | None = None
    cache_writes: bool = True
    workers: int = field(default_factory=default_workers)
    task_timeout_s: float = 600.0
    startup_timeout_s: float = 300.0

    def plan(self, worker: int, skip: set[int]) -> dict[str, Any]:
        return {
            "suite": self.suite.to_json(),
            "kernels": list(self.kernels),
            "workload": self.workload,
            "dtypes": list(self.dtypes),
            "every_dtype": self.every_dtype,
            "archs": list(self.archs),
            "cache": self.cache_dir is not None,
            "worker": worker,
            "workers": self.workers,
            "skip": sorted(skip),
        }


@dataclass(frozen=True)
class BuildResult:
    """The build records, and each recorded case's recipe (none where the build child
    died before sending them: those cases have no identity)."""

    suite: str
    records: list[BuildMetrics]
    recipes: list[CaseRecipe] = field(default_factory=list)


def run_build(
    request: BuildRequest,
    on_plan: Callable[[int], None] | None = None,
    on_record: Callable[[BuildMetrics], None] | None = None,
) -> BuildResult:
    """Every build record of the request, in a deterministic order.

    Raises :class:`BuildFailed` (one line) when the suite cannot be loaded at all.
    ``on_plan(n)`` is called once with the number of builds, ``on_record`` per record.
    """
    recall = _recall(request)
    whole = recall.whole() if recall is not None else None
    if whole is not None:  # an unchanged commit: no child, no compiler, no import
        suite, records, recipes = whole
        if on_plan is not None:
            on_plan(len(records))
        for record in records:
            if on_record is not None:
                on_record(record)
        return BuildResult(suite, records, recipes)
    events: queue.Queue[tuple[Any, ...]] = queue.Queue()
    with sandbox() as box:
        # The sandbox's Triton cache is new for this run: Triton's own cache would skip ptxas
        # and with it the spill report; ours is above it.
        env = {k: v for k, v in box.env().items() if k != "TRITON_INTERPRET"}
        request = replace(request, suite=box.suite(request.suite))
        cache = BuildCache(Path(request.cache_dir)) if request.cache_dir else None
        if recall is not None:
            recall.child_bases = memo.bases_of(request.suite)
        threads = [
            threading.Thread(
                target=_worker, args=(request, w, box, env, cache, recall, events), daemon=True
            )
            for w in range(request.workers)
        ]
        for thread in threads:
            thread.start()
        records: dict[int, BuildMetrics] = {}
        recipes: list[CaseRecipe] = []
        plans: set[tuple[str, int]] = set()
        fatal: str | None = None
        running = len(threads)
        while running:
            event = events.get()
            if event[0] == "done":
                running -= 1
            elif event[0] == "fatal":
                fatal = fatal or event[1]
            elif event[0] == "recipes":
                recipes = recipes or event[1]
            elif event[0] == "plan":
                if not plans and on_plan is not None:
                    on_plan(event[2] + (recall.held_count() if recall is not None else 0))
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
    suite = plans.pop()[0]
    fresh = [records[i] for i in sorted(records)]
    if recall is None:
        return BuildResult(suite, fresh, recipes)
    if request.cache_writes:
        recall.remember(suite, fresh, recipes)
    merged, recipes = recall.merge(fresh, recipes)
    return BuildResult(suite, merged, recipes)


def _recall(request: BuildRequest) -> memo.Recall | None:
    """The memo of this request's suite (``memo.py``), or None without a cache or where the
    suite's files cannot be known without importing it."""
    if request.cache_dir is None:
        return None
    tree = memo.scan(request.suite)
    if tree is None:
        return None
    what = {"archs": list(request.archs), "workload": request.workload,
            "dtypes": list(request.dtypes), "every_dtype": request.every_dtype}  # fmt: skip
    store = memo.Memo(tree, Path(request.cache_dir) / "memo", what, os.environ)
    return memo.Recall(store, request.kernels)


def _worker(
    request: BuildRequest,
    worker: int,
    box: Sandbox,
    env: dict[str, str],
    cache: BuildCache | None,
    recall: memo.Recall | None,
    events: queue.Queue[tuple[Any, ...]],
) -> None:
    done: set[int] = set()
    try:
        while not stop_requested() and _run_child(
            request, worker, box, env, cache, recall, done, events
        ):
            pass
    finally:
        events.put(("done",))


def _run_child(
    request: BuildRequest,
    worker: int,
    box: Sandbox,
    env: dict[str, str],
    cache: BuildCache | None,
    recall: memo.Recall | None,
    done: set[int],
    events: queue.Queue[tuple[Any, ...]],
) -> bool:
    """One child process; True when it died in a build and a fresh one should resume."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, lines = spawn(
            "kernelwatch.harness.build.worker",
            {**request.plan(worker, done), "memo": recall is not None},
            stderr,
            box,
            env,
            keep_stdin=True,
        )
        current: tuple[int, dict[str, Any]] | None = None
        deadline = time.monotonic() + request.startup_timeout_s
        try:
            while True:
                try:
                    event = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    kill(proc)
                    if current is None:
                        events.put(("fatal", _stalled(request, stderr)))
                        return False
                    reason = f"the compiler timed out after {request.task_timeout_s:.0f} s"
                    _fail(current, reason, tail(stderr), done, events)
                    return True
                if not isinstance(event, dict):
                    if event is not None:
                        kill(proc)
                    code = wait(proc)
                    if stop_requested():  # killed by a stop signal: not the build's fault
                        return False
                    if current is not None:
                        reason = (
                            f"the build process {death(code)} while compiling"
                            if event is None
                            else f"refused: {event} (kernel code writing results?)"
                        )
                        _fail(current, reason, tail(stderr), done, events)
                        return True
                    if event is not None:
                        events.put(("fatal", f"the build runner's output was refused: {event}"))
                    elif code != 0:
                        last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                        events.put(("fatal", f"the build runner {death(code)}: {last}"))
                    return False
                kind = event.get("event")
                if kind == "fatal":
                    events.put(("fatal", event["message"]))
                    return False
                if kind in ("lookup", "store"):
                    _serve_cache(event, cache, recall, request.cache_writes, proc)
                    continue
                if kind == "kernels" and recall is not None:
                    _answer(proc, {"held": recall.held(event.get("kernels"))})
                    continue
                if kind == "plan":
                    events.put(("plan", event["suite"], int(event["tasks"])))
                elif kind == "recipes":
                    events.put(("recipes", _recipes(event.get("recipes"))))
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


def _serve_cache(
    event: dict[str, Any],
    cache: BuildCache | None,
    recall: memo.Recall | None,
    writes: bool,
    proc: Any,
) -> None:
    """Answer a build child's cache lookup on its stdin, or store what it built when this
    run may write the cache: under the child's key bound to its kernel's source as this
    process read it (``Recall.bound``), never under a key the child chose alone."""
    bound = recall.bound(str(event.get("key", "")), event.get("kernel")) if recall else None
    if event["event"] == "lookup":
        hit = cache.get(bound) if cache is not None and bound is not None else None
        _answer(proc, {"record": hit.to_json() if hit is not None else None})
    elif cache is not None and writes and bound is not None:
        with contextlib.suppress(ValueError, RecordError):
            cache.put(bound, BuildMetrics.from_json(event["record"]))


def _answer(proc: Any, answer: dict[str, Any]) -> None:
    """One JSON line on the child's stdin."""
    with contextlib.suppress(OSError):  # the child died meanwhile
        proc.stdin.write(json.dumps(answer).encode() + b"\n")
        proc.stdin.flush()


def _recipes(data: Any) -> list[CaseRecipe]:
    """The child's recipes; none when any is malformed (the cases then have no identity,
    and count as changed)."""
    try:
        return [CaseRecipe.from_json(r) for r in data]
    except (TypeError, RecordError):
        return []


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
