"""Run a suite's cases in a child process and survive whatever the kernels do.

The supervisor reads the runner's JSON lines (``runner.py``). When the child dies in the
middle of a case (segfault, abort, illegal memory access) or a case outlives its timeout, that
case is recorded as an error with the child's stderr tail, and a fresh child resumes at the
next case. Nothing already reported is lost, and no kernel code runs in this process.
"""

from __future__ import annotations

import queue
import signal
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from kernelwatch.harness.child import death, decode, kill, spawn, tail, wait
from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    CorrectnessResult,
    DeviceInfo,
    Measurement,
    Method,
    SoftwareInfo,
    read_record,
)
from kernelwatch.harness.suite import SuiteRef, Task
from kernelwatch.harness.timing.request import BenchOptions

RUNNER = "kernelwatch.harness.runner"

#: What a child reports per case, by mode: check, bench, ab.
Outcome = CorrectnessResult | Measurement | ABMeasurement


class SuiteError(RuntimeError):
    """The suite could not be loaded at all (import error, malformed spec, runner crash)."""


class SelectionUnavailable(ValueError):
    """The selection names kernels, a workload or dtypes the suite does not have."""


@dataclass(frozen=True)
class CheckRequest:
    """What to check, and how long any one case may take before it counts as hung."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    kernels: Sequence[str] = ()
    workload: str = "smoke"
    dtypes: Sequence[str] = ()
    seed: int = 0
    case_timeout_s: float = 300.0
    startup_timeout_s: float = 180.0

    mode = "check"

    def plan(self, start: int) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "suite": self.suite.to_json(),
            "kernels": list(self.kernels),
            "workload": self.workload,
            "dtypes": list(self.dtypes),
            "seed": self.seed,
            "start": start,
        }


@dataclass(frozen=True)
class BenchRequest(CheckRequest):
    """What to time, and how (:class:`BenchOptions`)."""

    options: BenchOptions = field(default_factory=BenchOptions)
    mode = "bench"

    def plan(self, start: int) -> dict[str, Any]:
        return {**super().plan(start), "bench": self.options.to_json()}


@dataclass(frozen=True)
class ABRequest(BenchRequest):
    """What to time A/B: every selected case of suite A (``suite``: a PR's base, or the
    known-good commit of a bisection) interleaved with the same case of suite B
    (``suite_b``: the head, or the probed commit), both imported by one child process, on
    one device, through one timer (:class:`BenchOptions`; the stock-library baseline is not
    timed). The cases are the selection on A's suite, then those only B's suite has."""

    suite_b: SuiteRef = field(default_factory=SuiteRef)
    mode = "ab"

    def plan(self, start: int) -> dict[str, Any]:
        return {**super().plan(start), "suite_b": self.suite_b.to_json()}


@dataclass
class _Context:
    suite: str = ""
    tasks: list[Task] = field(default_factory=list)
    device: DeviceInfo | None = None
    software: SoftwareInfo | None = None
    method: Method | None = None
    planned: bool = False
    # Values a child measured once for the whole run (ceilings), handed to later children.
    carry: dict[str, Any] = field(default_factory=dict)
    on_carry: Callable[[str, Any], None] | None = None


def run_checks(
    request: CheckRequest, on_plan: Callable[[int], None] | None = None
) -> Iterator[CorrectnessResult]:
    """Yield one record per selected case, in order, whatever the kernels do.

    Raises :class:`SelectionUnavailable` or :class:`SuiteError` before yielding anything if the
    selection or the suite is unusable. ``on_plan(n)`` is called once with the case count.
    """
    for record in _supervise(request, _Context(), on_plan):
        assert isinstance(record, CorrectnessResult)
        yield record


def run_benches(
    request: BenchRequest,
    on_plan: Callable[[int], None] | None = None,
    on_carry: Callable[[str, Any], None] | None = None,
) -> Iterator[Measurement]:
    """Like :func:`run_checks`, timing each case: yields one measurement record per case.
    ``on_carry(key, value)`` is told what the run measured once (``ceilings``)."""
    for record in _supervise(request, _Context(on_carry=on_carry), on_plan):
        assert isinstance(record, Measurement)
        yield record


def run_ab(
    request: ABRequest, on_plan: Callable[[int], None] | None = None
) -> Iterator[ABMeasurement]:
    """Like :func:`run_benches`, timing each case at A and B interleaved: yields one A/B
    record per case. A crash, hang or NaN output on either side makes that case ``error``
    (with the stderr tail or traceback) and a fresh child resumes at the next case; a case
    one side lacks is ``unsupported``."""
    for record in _supervise(request, _Context(), on_plan):
        assert isinstance(record, ABMeasurement)
        yield record


def _supervise(
    request: CheckRequest, ctx: _Context, on_plan: Callable[[int], None] | None
) -> Iterator[Outcome]:
    start = 0
    while True:
        next_start = yield from _run_child(request, start, ctx, on_plan)
        if next_start is None or next_start >= len(ctx.tasks):
            return
        start = next_start


def _run_child(
    request: CheckRequest,
    start: int,
    ctx: _Context,
    on_plan: Callable[[int], None] | None,
) -> Iterator[Outcome]:
    """One child process; returns the index to resume at, or None when all cases are done."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, lines = spawn(
            "kernelwatch.harness.runner", {**request.plan(start), "carry": ctx.carry}, stderr
        )
        current: int | None = None
        next_index = start
        deadline = time.monotonic() + request.startup_timeout_s
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    kill(proc)
                    if not ctx.planned:
                        raise SuiteError(
                            f"the runner produced nothing for {request.startup_timeout_s:.0f} s "
                            "while loading the suite"
                        ) from None
                    # Stuck inside a case, or between two: either way the next case pays.
                    stuck = current if current is not None else next_index
                    reason = f"timed out after {request.case_timeout_s:.0f} s (hung?)"
                    yield _failure(request, ctx, stuck, reason, tail(stderr))
                    return stuck + 1
                event = decode(line) if line is not None else None
                if event is None:  # end of output, or a line cut short by a dying child
                    if line is not None:
                        kill(proc)
                    code = wait(proc)
                    if current is not None:
                        yield _failure(request, ctx, current, death(code), tail(stderr))
                        return current + 1
                    if not ctx.planned or (code != 0 and next_index == start):
                        last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                        raise SuiteError(f"the runner {death(code)} before running a case: {last}")
                    return next_index if code != 0 else None
                kind = event.get("event")
                if kind == "fatal":
                    proc.wait()
                    error = SelectionUnavailable if event["kind"] == "selection" else SuiteError
                    raise error(event["message"])
                if kind == "carry":
                    ctx.carry[event["key"]] = event["value"]
                    if ctx.on_carry is not None:
                        ctx.on_carry(event["key"], event["value"])
                elif kind == "plan":
                    _take_plan(ctx, event)
                    if on_plan is not None and start == 0:
                        on_plan(len(ctx.tasks))
                    deadline = time.monotonic() + request.case_timeout_s
                elif kind == "begin":
                    current = int(event["task"])
                    deadline = time.monotonic() + request.case_timeout_s
                elif kind == "result":
                    yield read_record(event["record"])
                    next_index = int(event["task"]) + 1
                    current = None
                    deadline = time.monotonic() + request.case_timeout_s
        finally:
            kill(proc)


@dataclass(frozen=True)
class SelfcheckRequest:
    """A self-check: one case per kernel of ``workload`` in ``dtype``, within ``timeout_s``."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    kernels: Sequence[str] = ()
    workload: str = "llm"
    dtype: str = "bf16"
    budget_s: float | None = None
    timeout_s: float = 600.0

    def plan(self) -> dict[str, Any]:
        options = {
            "kernels": list(self.kernels),
            "workload": self.workload,
            "dtype": self.dtype,
            "budget_s": self.budget_s,
        }
        return {"mode": "selfcheck", "suite": self.suite.to_json(), "selfcheck": options}


def run_selfcheck(request: SelfcheckRequest, on_progress: Callable[[str], None]) -> str:
    """Run the self-check in a child and return its markdown report.

    Raises :class:`SelectionUnavailable` for a selection the suite lacks and
    :class:`SuiteError` when the suite cannot load or the child dies or overruns.
    """
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, lines = spawn(RUNNER, request.plan(), stderr)
        deadline = time.monotonic() + request.timeout_s
        try:
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise SuiteError(
                        f"the self-check did not finish within {request.timeout_s:.0f} s; "
                        "pass a larger --timeout or fewer --kernel"
                    ) from None
                event = decode(line) if line is not None else None
                if event is None:
                    code = wait(proc) if line is None else -signal.SIGKILL
                    last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                    raise SuiteError(f"the self-check runner {death(code)}: {last}")
                if event.get("event") == "progress":
                    on_progress(event["message"])
                elif event.get("event") == "report":
                    return event["markdown"]
                elif event.get("event") == "fatal":
                    error = SelectionUnavailable if event["kind"] == "selection" else SuiteError
                    raise error(event["message"])
        finally:
            kill(proc)


def _take_plan(ctx: _Context, event: dict[str, Any]) -> None:
    tasks = [Task.from_json(t) for t in event["tasks"]]
    if ctx.planned and [t.to_json() for t in tasks] != [t.to_json() for t in ctx.tasks]:
        raise SuiteError("the suite listed different cases after a restart; is it deterministic?")
    ctx.suite, ctx.tasks, ctx.planned = event["suite"], tasks, True
    ctx.device = DeviceInfo(**event["device"])
    ctx.software = SoftwareInfo(**event["software"])
    ctx.method = Method(**event["method"]) if event.get("method") else None


#: How the reason of a case begins when its child process died or hung in it (``death``,
#: ``_run_child``); a case that raised has ``Type: message`` instead.
DIED = ("died of signal", "exited with code", "timed out after")


def died(record: CorrectnessResult | Measurement | ABMeasurement) -> bool:
    """Whether the child process running ``record``'s case died or hung in it, as opposed
    to the kernel raising (which the child survived)."""
    return record.reason.startswith(DIED)


def _failure(
    request: CheckRequest, ctx: _Context, index: int, reason: str, stderr_tail: str
) -> Outcome:
    """The record of a case the child died or hung in, in the kind the mode produces."""
    assert ctx.device is not None and ctx.software is not None
    task = ctx.tasks[index]
    case = CaseId(ctx.suite, task.kernel, task.workload, task.params, task.dtype)
    common = {"case": case, "reason": reason, "device": ctx.device, "software": ctx.software}
    if ctx.method is None:
        return CorrectnessResult(
            verdict="error",
            tolerance=task.tolerance,
            seed=request.seed,
            detail=stderr_tail,
            **common,
        )
    kind = ABMeasurement if request.mode == "ab" else Measurement
    return kind(status="error", method=ctx.method, detail=stderr_tail, **common)
