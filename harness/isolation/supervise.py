"""Run a suite's cases in a child process and survive whatever the kernels do.

The supervisor reads the kernel child's JSON lines (``kernel_child.py``). When the child dies
in the middle of a case (segfault, abort, illegal memory access) or a case outlives its
timeout, that case is recorded as an error with the child's stderr tail, and a fresh child
resumes at the next case. Nothing already reported is lost, and no kernel code runs in this process.

Every child runs in a sandbox (``sandbox.py``) and reports on a signed channel
(``channel.py``); a case's record is taken only as the answer to the case the child began.
"""

from __future__ import annotations

import math
import queue
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kernelwatch.harness.isolation.channel import Forged
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
from kernelwatch.harness.timing.pinning import Pins, pins_to_json
from kernelwatch.harness.timing.request import BenchOptions, SelfcheckOptions

RUNNER = "kernelwatch.harness.isolation.kernel_child"

#: What a child reports per case, by mode: check, bench, ab.
Outcome = CorrectnessResult | Measurement | ABMeasurement


class SuiteError(RuntimeError):
    """The suite could not be loaded at all (import error, malformed spec, runner crash)."""


class SelectionUnavailable(ValueError):
    """The selection names kernels, a workload or dtypes the suite does not have."""


@dataclass(frozen=True)
class CheckRequest:
    """What to check, and how long any one case may take before it counts as hung.

    ``pins`` are configs a check launches instead of autotuning (a bench request takes its
    own in ``options``). ``stop_at`` is a deadline on ``time.monotonic()`` for the whole
    run: when it passes, the child is killed and the records stop, without a record for
    the case it was in. ``cases_per_kernel``: at most this many of each kernel's cases,
    evenly spread over its workload (0: all; ``select_tasks``); ``params``: only the cases
    with these ``KEY=VALUE`` parameter values. Without ``autotune`` a check
    launches each kernel's ``pinned_config`` where no pin names one: one compile a
    specialisation instead of one a config.
    """

    suite: SuiteRef = field(default_factory=SuiteRef)
    kernels: Sequence[str] = ()
    workload: str = "smoke"
    dtypes: Sequence[str] = ()
    seed: int = 0
    case_timeout_s: float = 300.0
    startup_timeout_s: float = 180.0
    pins: Pins = field(default_factory=dict)
    stop_at: float | None = None
    cases_per_kernel: int = 0
    autotune: bool = True
    params: Sequence[str] = ()

    mode = "check"

    def plan(self, start: int) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "suite": self.suite.to_json(),
            "kernels": list(self.kernels),
            "workload": self.workload,
            "dtypes": list(self.dtypes),
            "cases_per_kernel": self.cases_per_kernel,
            "params": list(self.params),
            "autotune": self.autotune,
            "seed": self.seed,
            "start": start,
            "pins": pins_to_json(self.pins),
            "case_timeout_s": self.case_timeout_s,
            "startup_timeout_s": self.startup_timeout_s,
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
    (``suite_b``: the head, or the probed commit), each imported by a child process of its
    own, on one device, with one timing method (:class:`BenchOptions`; the stock-library
    baseline is not timed). The cases are the selection on A's suite, then those only B's
    suite has. Its ``plan`` is the runner's ``ab`` mode's (both suites in one child), which
    only distributed cases still use."""

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
    families: dict[str, str] = field(default_factory=dict)
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


def run_together(request: ABRequest) -> Iterator[CorrectnessResult | Measurement | ABMeasurement]:
    """Both suites of ``request`` in one child (the runner's ``ab`` mode, whose ranks time
    both sides): the distributed cases' A/B (``ab_sides.run_ab`` runs every other case with
    each side in a process of its own)."""
    return _supervise(request, _Context(), None)


def _supervise(
    request: CheckRequest, ctx: _Context, on_plan: Callable[[int], None] | None
) -> Iterator[Outcome]:
    with sandbox() as box:
        request = _in_sandbox(request, box)
        start = 0
        while True:
            next_start = yield from _run_child(request, box, start, ctx, on_plan)
            if next_start is None or next_start >= len(ctx.tasks):
                return
            start = next_start


def _in_sandbox(request: CheckRequest, box: Sandbox) -> CheckRequest:
    """``request`` with its suites where the sandboxed child can import them."""
    request = replace(request, suite=box.suite(request.suite))
    if isinstance(request, ABRequest):
        request = replace(request, suite_b=box.suite(request.suite_b))
    return request


def _run_child(
    request: CheckRequest,
    box: Sandbox,
    start: int,
    ctx: _Context,
    on_plan: Callable[[int], None] | None,
) -> Iterator[Outcome]:
    """One child process; returns the index to resume at, or None when all cases are done.

    A case's result counts only when it is the one the child began, and only once the child
    goes on to the next case or ends cleanly after the last: a result the child did not
    follow up properly (it died, hung or stopped early right after it) or that arrived out of
    turn is refused, and the case becomes an error. So a kernel that writes a fake result
    and then crashes its process gains nothing."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn(RUNNER, {**request.plan(start), "carry": ctx.carry}, stderr, box)
        current: int | None = None
        held: tuple[int, Outcome] | None = None
        next_index = start
        deadline = time.monotonic() + request.startup_timeout_s
        try:
            while True:
                stop_at = request.stop_at if request.stop_at is not None else math.inf
                try:
                    event = events.get(timeout=max(0.0, min(deadline, stop_at) - time.monotonic()))
                except queue.Empty:
                    kill(proc)
                    if time.monotonic() >= stop_at:
                        return None
                    if not ctx.planned:
                        raise SuiteError(
                            f"the runner produced nothing for {request.startup_timeout_s:.0f} s "
                            "while loading the suite"
                        ) from None
                    if held is not None and current is None:
                        yield _settled(request, ctx, held, "then hung", tail(stderr))
                    # Stuck inside a case, or between two: either way the next case pays.
                    stuck = current if current is not None else next_index
                    reason = f"timed out after {request.case_timeout_s:.0f} s (hung?)"
                    yield _failure(request, ctx, stuck, reason, tail(stderr))
                    return stuck + 1
                if isinstance(event, Forged):
                    kill(proc)
                    if not ctx.planned:
                        raise SuiteError(f"the runner's output was refused: {event}")
                    index = current if current is not None else (held or (next_index,))[0]
                    reason = f"refused: {event} (kernel code writing results?)"
                    yield _failure(request, ctx, index, reason, tail(stderr))
                    return index + 1
                if event is None:  # end of output
                    code = wait(proc)
                    if stop_requested():  # killed by our stop signal: not the case's fault
                        if held is not None and current is None:
                            yield _settled(request, ctx, held, "", tail(stderr))
                        check_stopped()
                    if current is not None:
                        yield _failure(request, ctx, current, death(code), tail(stderr))
                        return current + 1
                    if not ctx.planned or (next_index == start and held is None):
                        last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                        raise SuiteError(f"the runner {death(code)} before running a case: {last}")
                    if held is not None:
                        clean = code == 0 and next_index >= len(ctx.tasks)
                        why = "" if clean else f"then {death(code)} before the next case"
                        yield _settled(request, ctx, held, why, tail(stderr))
                    return next_index
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
                    if held is not None:
                        yield held[1]
                        held = None
                    current = int(event["task"])
                    deadline = time.monotonic() + request.case_timeout_s
                elif kind == "starting":  # a distributed case's ranks start, then it runs
                    deadline = time.monotonic() + request.startup_timeout_s
                    deadline += request.case_timeout_s
                elif kind == "result":
                    index = int(event["task"])
                    record = read_record(event["record"])
                    if index != current or not _is_case(record, ctx, index):
                        kill(proc)
                        stray = current if current is not None else next_index
                        reason = f"refused a result for case {index} while case {stray} ran"
                        yield _failure(request, ctx, stray, reason, tail(stderr))
                        return stray + 1
                    held = (index, record)  # type: ignore[assignment]
                    next_index = index + 1
                    current = None
                    deadline = time.monotonic() + request.case_timeout_s
        finally:
            kill(proc)


def _is_case(record: Any, ctx: _Context, index: int) -> bool:
    """Whether ``record`` reports the case ``index`` of the plan, in the mode's kind."""
    if not isinstance(record, Outcome) or not 0 <= index < len(ctx.tasks):
        return False
    task = ctx.tasks[index]
    case = record.case
    return (case.suite, case.kernel, case.workload, dict(case.params), case.dtype) == (
        ctx.suite, task.kernel, task.workload, dict(task.params), task.dtype,
    )  # fmt: skip


def _settled(
    request: CheckRequest, ctx: _Context, held: tuple[int, Outcome], why: str, stderr_tail: str
) -> Outcome:
    """A held result once the child stopped: as reported when it stopped cleanly (``why``
    empty) or when it reports no success; otherwise refused, as an error saying why."""
    index, record = held
    claims = getattr(record, "verdict", None) == "pass" or getattr(record, "status", "") == "ok"
    if not why or not claims:
        return record
    reason = f"refused its result: the runner reported it, {why}"
    return _failure(request, ctx, index, reason, stderr_tail)


@dataclass(frozen=True)
class SelfcheckRequest:
    """The self-check's measurements on this device (:class:`SelfcheckOptions`), stopped
    at ``stop_at`` (``time.monotonic()``) whatever they are doing; ``wrapper`` is a command
    line the child runs under (a profiler)."""

    suite: SuiteRef = field(default_factory=SuiteRef)
    options: SelfcheckOptions = field(default_factory=SelfcheckOptions)
    stop_at: float | None = None
    wrapper: tuple[str, ...] = ()

    def plan(self) -> dict[str, Any]:
        return {
            "mode": "selfcheck",
            "suite": self.suite.to_json(),
            "selfcheck": self.options.to_json(),
        }


def run_selfcheck(
    request: SelfcheckRequest, on_progress: Callable[[str], None]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Run the self-check's measurements in a child; yield ``(name, data)`` for each as it
    finishes. At ``stop_at`` the child is killed and the iteration ends.

    Raises :class:`SelectionUnavailable` for a selection the suite lacks and
    :class:`SuiteError` when the suite cannot load or the child dies.
    """
    with tempfile.TemporaryFile(mode="w+b") as stderr, sandbox() as box:
        plan = {**request.plan(), "suite": box.suite(request.suite).to_json()}
        proc, events = spawn(RUNNER, plan, stderr, box, wrapper=request.wrapper)
        stop_at = request.stop_at if request.stop_at is not None else math.inf
        try:
            while True:
                try:
                    event = events.get(timeout=max(0.0, min(stop_at - time.monotonic(), 1e6)))
                except queue.Empty:
                    return
                if isinstance(event, Forged):
                    raise SuiteError(f"the self-check runner's output was refused: {event}")
                if event is None:
                    code = wait(proc)
                    if code == 0:
                        return
                    last = (tail(stderr).splitlines() or ["(empty)"])[-1]
                    raise SuiteError(f"the self-check runner {death(code)}: {last}")
                if event.get("event") == "progress":
                    on_progress(event["message"])
                elif event.get("event") == "stage":
                    yield event["name"], event["data"]
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
    ctx.families = dict(event["families"])


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
    case = CaseId(ctx.suite, task.kernel, task.workload, task.params, task.dtype,
                  ctx.families[task.kernel])  # fmt: skip
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
