"""An A/B comparison with base and head in processes of their own, interleaved on one device.

The commit under test is untrusted: in one process with the base, a hostile head could
patch what the base's launches and timer run (``gc``, ``object.__setattr__``, Triton's
launcher) and slow only those, so that 3x the work read as "faster". Here each side is a
kernel child in ``arm`` mode (``kernel_child.py``), in a sandbox of its own (private directory,
Triton cache, channel key), and this process, which imports no torch and no kernel code,
orders them: per case, A prepares (its config fixed: a pin, its autotuner's choice), then B
(launching A's autotuned config when its tuning space has it), a cool-down, each warms up,
then blocks of samples alternate, A's then B's, under one stopping rule over both
(``sampling.collect_blocks``), and each side builds its own ``Measurement``, paired here
(``measurement.ab_pair``).

A side that dies, hangs or writes a line its key did not sign costs the case, recorded as an
error naming the side, and that side alone starts afresh for the next case; a side whose
case raised on a GPU exits to be restarted (its CUDA context may be unusable). Distributed
cases still run both suites in one child (the runner's ``ab`` mode, whose ranks compare
them), after the others.
"""

from __future__ import annotations

import json
import math
import os
import queue
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from typing import IO, Any

from kernelwatch.harness.isolation.channel import Forged
from kernelwatch.harness.isolation.child import check_stopped, death, kill, spawn, tail, wait
from kernelwatch.harness.isolation.sandbox import Sandbox, sandbox
from kernelwatch.harness.isolation.supervise import (
    ABRequest,
    SelectionUnavailable,
    SuiteError,
    run_together,
)
from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    Method,
    SoftwareInfo,
    in_family,
    read_record,
)
from kernelwatch.harness.suite import SuiteRef, Task
from kernelwatch.harness.timing.measurement import ab_pair
from kernelwatch.harness.timing.sampling import Collected, Sample, collect_blocks

RUNNER = "kernelwatch.harness.isolation.kernel_child"
SIDES = ("A", "B")


class SideLost(Exception):
    """Side ``side``'s process died, hung or was refused; ``reason`` names the side."""

    def __init__(self, side: str, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.side, self.reason, self.detail = side, reason, detail


class SideFailed(Exception):
    """A command of side ``side`` raised (its process lives on, or on a GPU exits to be
    restarted)."""

    def __init__(self, side: str, status: str, reason: str, detail: str) -> None:
        super().__init__(reason)
        self.side, self.status, self.reason, self.detail = side, status, reason, detail


class StartFailed(Exception):
    """A side could not start: its ``fatal`` event (``kind``: suite or selection), or nothing
    before the start-up timeout, or death before its plan."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class StopAt(Exception):
    """The run's ``stop_at`` deadline passed."""


@dataclass
class Side:
    """One side's child process, restarted when it is lost."""

    name: str
    plan: dict[str, Any]
    box: Sandbox
    stderr: IO[bytes]
    stop_at: float
    case_timeout_s: float
    proc: Any = None
    events: queue.Queue[Any] | None = None
    planned: dict[str, Any] | None = None
    carried: list[tuple[str, Any]] = field(default_factory=list)

    def start(self, carry: dict[str, Any]) -> None:
        """Spawn the child on its plan; :meth:`ready` reads its plan event."""
        plan = {**self.plan, "carry": carry}
        self.proc, self.events = spawn(RUNNER, plan, self.stderr, self.box, keep_stdin=True)
        self.planned = None

    def ready(self, timeout_s: float) -> dict[str, Any]:
        """The child's plan event (carried values noted on the way). Raises StartFailed."""
        deadline = time.monotonic() + timeout_s
        while True:
            hung = f"produced nothing for {timeout_s:.0f} s while loading the suite"
            try:
                event = self._next(deadline, hung)
            except SideLost as lost:
                why = lost.reason.split(": ", 1)[-1]
                last = (lost.detail.splitlines() or ["(empty)"])[-1]
                raise StartFailed("suite", f"side {self.name}'s runner {why}: {last}") from None
            if event.get("event") == "fatal":
                self.proc.wait()
                raise StartFailed(event["kind"], event["message"])
            if event.get("event") == "carry":
                self.carried.append((event["key"], event["value"]))
            elif event.get("event") == "plan":
                self.planned = event
                return event

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ask(self, command: dict[str, Any], deadline: float, answer: str) -> dict[str, Any]:
        """Send ``command`` and return the child's ``answer`` event. Raises SideFailed when
        the command raised, SideLost when the child died, hung or answered out of turn."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(command).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: its end of output says how
        hung = f"timed out after {self.case_timeout_s:.0f} s (hung?)"
        event = self._next(deadline, hung)
        kind = event.get("event")
        if kind == "failed":
            status, reason, detail = (str(event.get(k)) for k in ("status", "reason", "detail"))
            raise SideFailed(self.name, status, reason, detail)
        if kind != answer:
            kill(self.proc)
            reason = f"{self.name}: refused: {kind!r} in answer to {command['cmd']!r}"
            raise SideLost(self.name, reason, tail(self.stderr))
        return event

    def _next(self, deadline: float, hung: str) -> dict[str, Any]:
        assert self.events is not None
        try:
            limit = min(deadline, self.stop_at)
            event = self.events.get(timeout=max(0.0, min(limit - time.monotonic(), 1e6)))
        except queue.Empty:
            kill(self.proc)
            if time.monotonic() >= self.stop_at:
                raise StopAt from None
            raise SideLost(self.name, f"{self.name}: {hung}", tail(self.stderr)) from None
        if isinstance(event, Forged):
            kill(self.proc)
            reason = f"{self.name}: refused: {event} (kernel code writing results?)"
            raise SideLost(self.name, reason, tail(self.stderr))
        if event is None:
            code = wait(self.proc)
            check_stopped()  # killed by our stop signal: not the case's fault
            raise SideLost(self.name, f"{self.name}: {death(code)}", tail(self.stderr))
        return event

    def close(self) -> None:
        if self.proc is not None:
            kill(self.proc)


def run_ab(
    request: ABRequest, on_plan: Callable[[int], None] | None = None
) -> Iterator[ABMeasurement]:
    """Like ``supervise.run_benches``, timing each case at A and B interleaved: one A/B
    record per selected case, in order, A and B each in a child process and sandbox of its
    own (see the module docstring), then the distributed cases through ``ab`` mode. A crash,
    hang or NaN output on either side makes that case ``error`` naming the side (with the
    stderr tail or traceback), and a fresh child of that side serves the next case; a case
    one side lacks is ``unsupported``. Raises ``SelectionUnavailable`` or ``SuiteError``
    before any record for a selection or suite that cannot run."""
    cpu = shared_cpu()
    with ExitStack() as stack:
        sides = []
        for name, ref in zip(SIDES, (request.suite, request.suite_b), strict=True):
            # A sandbox each: neither side sees the other's private directory or Triton cache.
            box = stack.enter_context(sandbox())
            stderr = stack.enter_context(tempfile.TemporaryFile(mode="w+b"))
            plan = _plan(request, name, box.suite(ref), cpu)
            stop_at = request.stop_at if request.stop_at is not None else math.inf
            side = Side(name, plan, box, stderr, stop_at, request.case_timeout_s)
            stack.callback(side.close)
            sides.append(side)
        try:
            pair = _Pair(request, sides)
            pair.start()
        except StartFailed as exc:
            raise (SelectionUnavailable if exc.kind == "selection" else SuiteError)(
                str(exc)
            ) from None
        except StopAt:
            return
        if on_plan is not None:
            on_plan(len(pair.tasks))
        try:
            for index in range(len(pair.tasks)):
                record = pair.case(index)
                if record is not None:
                    yield in_family(record, pair.families[pair.tasks[index].kernel])
        except StopAt:
            return
        finally:
            for side in sides:
                side.close()
    if pair.deferred:
        yield from _distributed(request, pair)


def _plan(request: ABRequest, side: str, ref: SuiteRef, cpu: int) -> dict[str, Any]:
    plan = {**request.plan(0), "mode": "arm", "side": side, "suite": ref.to_json()}
    plan["cpus"] = [cpu]
    plan.pop("suite_b", None)
    return plan


def shared_cpu() -> int:
    """The one CPU both sides of a pair run on. Two processes left to the scheduler settle
    on different CPUs, and CPUs of one host differ in speed (a busier SMT sibling, another
    tenant's vCPU): measured on this 2-vCPU machine, an A/A pair of the built-in suite read
    0.75x to 1.23x that way and 0.97x to 1.02x on one CPU, as tight as both sides in one
    process. Which CPU of this process's set is chosen by its pid, so that concurrent runs
    on one host spread out."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[os.getpid() % len(cpus)]


class _Pair:
    """The two sides of a run, the merged case list, and each case's coordination."""

    def __init__(self, request: ABRequest, sides: list[Side]) -> None:
        self.request = request
        self.a, self.b = sides
        self.tasks: list[Task] = []
        self.lacking: list[list[str]] = []
        self.distributed: list[set[str]] = [set(), set()]
        self.families: dict[str, str] = {}
        self.deferred: list[int] = []
        self.carry: dict[str, Any] = {}
        self.suite = ""
        self.device: DeviceInfo | None = None
        self.software: SoftwareInfo | None = None
        self.method: Method | None = None
        self.restart: set[str] = set()
        self.listed: dict[str, list[Any]] = {}

    def start(self) -> None:
        """Start both sides, merge their selections: A's cases, then those only B has."""
        request = self.request
        if request.options.measure_ceilings:
            # B's roofline is A's: start B once A has measured the ceilings.
            self.a.start(self.carry)
            self._take_carry(self.a, self.a.ready(request.startup_timeout_s))
            self.b.start(self.carry)
        else:
            self.a.start(self.carry)
            self.b.start(self.carry)
            self._take_carry(self.a, self.a.ready(request.startup_timeout_s))
        plan_b = self.b.ready(request.startup_timeout_s)
        plan_a = self.a.planned
        assert plan_a is not None
        self.listed = {"A": plan_a["tasks"], "B": plan_b["tasks"]}
        tasks_a = [Task.from_json(t) for t in plan_a["tasks"]]
        tasks_b = [Task.from_json(t) for t in plan_b["tasks"]]
        deadline = time.monotonic() + request.startup_timeout_s
        try:
            a_lacks = self.a.ask({"cmd": "lacks", "tasks": plan_b["tasks"]}, deadline, "lacks")
            b_lacks = self.b.ask({"cmd": "lacks", "tasks": plan_a["tasks"]}, deadline, "lacks")
        except (SideLost, SideFailed) as exc:
            raise StartFailed("suite", str(exc)) from None
        extra = [(t, why) for t, why in zip(tasks_b, a_lacks["reasons"], strict=True) if why]
        self.tasks = tasks_a + [t for t, _ in extra]
        self.lacking = [[f"B {why}"] if why else [] for why in b_lacks["reasons"]]
        self.lacking += [[f"A {why}"] for _, why in extra]
        self.suite = plan_a["suite"]
        self.device = DeviceInfo(**plan_a["device"])
        self.software = SoftwareInfo(**plan_a["software"])
        self.method = Method(**plan_a["method"])
        # Each record names its kernel's family as the head declares it.
        self.families = {**plan_a["families"], **plan_b["families"]}
        self.distributed = [set(plan_a["distributed"]), set(plan_b["distributed"])]

    def _take_carry(self, side: Side, plan: dict[str, Any]) -> None:
        for key, value in side.carried:
            self.carry.setdefault(key, value)
        side.carried.clear()

    def _restarted(self, side: Side) -> None:
        """A side lost in an earlier case, started afresh on the same plan."""
        if side.name not in self.restart and side.alive():
            return
        self.restart.discard(side.name)
        side.close()
        side.start(self.carry)
        try:
            plan = side.ready(self.request.startup_timeout_s)
        except StartFailed as exc:
            self.restart.add(side.name)
            reason = f"{side.name}: restart failed: {exc}"
            raise SideLost(side.name, reason, tail(side.stderr)) from None
        if plan["tasks"] != self.listed[side.name]:
            self.restart.add(side.name)
            reason = f"{side.name}: listed different cases after a restart; is it deterministic?"
            raise SideLost(side.name, reason, "")

    def case(self, index: int) -> ABMeasurement | None:
        """The record of case ``index``; None for a distributed case, run after the rest."""
        task = self.tasks[index]
        common = self._common(task)
        if self.lacking[index]:
            reason = "; ".join(self.lacking[index])
            return ABMeasurement(status="unsupported", reason=reason, **common)
        distributed = [task.kernel in names for names in self.distributed]
        if all(distributed):
            self.deferred.append(index)
            return None
        if any(distributed):
            reason = f"one side declares {task.kernel!r} distributed, the other not"
            return ABMeasurement(status="unsupported", reason=reason, **common)
        start = time.perf_counter()
        try:
            for side in (self.a, self.b):
                self._restarted(side)
            # After the restarts: a side's start-up has its own limit, and on a loaded host
            # re-importing torch took most of an 8 s case limit from the case after a hang.
            deadline = time.monotonic() + self.request.case_timeout_s
            base, head = self._measure(task, deadline)
        except SideFailed as exc:
            if self.device is not None and self.device.kind == "cuda":
                self.restart.add(exc.side)  # it exits: its CUDA context may be unusable
            if exc.status == "unsupported":
                return ABMeasurement(status="unsupported", reason=exc.reason, **common)
            return ABMeasurement(status="error", reason=exc.reason, detail=exc.detail,
                                 duration_s=time.perf_counter() - start, **common)  # fmt: skip
        except SideLost as lost:
            self.restart.add(lost.side)
            return ABMeasurement(status="error", reason=lost.reason, detail=lost.detail, **common)
        return ab_pair(common, base, head, start)

    def _measure(self, task: Task, deadline: float) -> tuple[Measurement, Measurement]:
        """Both sides' records of ``task``: prepare A then B, cool down, warm each, sample in
        alternating blocks under the stopping rule, finish each."""
        request = self.request
        ask = {"task": task.to_json(), "suite": self.suite, "seed": request.seed}
        first = self.a.ask({"cmd": "prepare", **ask, "shared": None}, deadline, "prepared")
        shared = {"config": first["config"], "source": first["config_source"]}
        LaunchConfig.from_json(shared["config"])  # a malformed config is refused here
        self.b.ask({"cmd": "prepare", **ask, "shared": shared}, deadline, "prepared")
        assert self.device is not None
        resolved = request.options.resolved(self.device.kind)
        # After the config-fixing launches: autotuning runs the GPU at full load.
        time.sleep(resolved.cool_down_s)
        resolution = max(
            float(side.ask({"cmd": "warm"}, deadline, "warm")["resolution_ns"])
            for side in (self.a, self.b)
        )

        def arm(side: Side) -> Callable[[int], list[Sample]]:
            def take(n: int) -> list[Sample]:
                answer = side.ask({"cmd": "sample", "n": n}, deadline, "samples")
                return [_sample(side, one) for one in answer["samples"]]

            return take

        collected: Collected = collect_blocks([arm(self.a), arm(self.b)], resolved.rule,
                                              resolution_ns=resolution)  # fmt: skip
        records = []
        for side in (self.a, self.b):
            event = side.ask({"cmd": "finish", "stop": collected.stop}, deadline, "result")
            records.append(self._side_record(side, task, event["record"], collected))
        return records[0], records[1]

    def _side_record(
        self, side: Side, task: Task, data: dict[str, Any], collected: Collected
    ) -> Measurement:
        """A side's record, refused unless it is a measurement of ``task`` holding the
        samples it reported."""
        index = SIDES.index(side.name)
        try:
            record = read_record(data)
        except (KeyError, TypeError, ValueError) as exc:
            reason = f"{side.name}: refused an unreadable record ({exc})"
            raise SideLost(side.name, reason, "") from None
        case = record.case if isinstance(record, Measurement) else None
        ours = (self.suite, task.kernel, task.workload, dict(task.params), task.dtype)
        if case is None or (case.suite, case.kernel, case.workload, dict(case.params),
                            case.dtype) != ours:  # fmt: skip
            raise SideLost(side.name, f"{side.name}: refused a record of another case", "")
        assert isinstance(record, Measurement)
        if record.samples_ns != tuple(s.ns for s in collected.arms[index]):
            reason = f"{side.name}: refused a record of samples it did not report"
            raise SideLost(side.name, reason, "")
        return record

    def _common(self, task: Task) -> dict[str, Any]:
        assert self.device is not None and self.software is not None
        case = CaseId(self.suite, task.kernel, task.workload, dict(task.params), task.dtype)
        return {"case": case, "method": self.method, "device": self.device,
                "software": self.software}  # fmt: skip


def _sample(side: Side, data: Any) -> Sample:
    """One reported sample; a malformed one loses the side."""
    try:
        sample = Sample(**data)
        float(sample.ns)
    except (TypeError, ValueError) as exc:
        reason = f"{side.name}: refused a malformed sample ({exc})"
        raise SideLost(side.name, reason, "") from None
    return sample


def _distributed(request: ABRequest, pair: _Pair) -> Iterator[ABMeasurement]:
    """The distributed cases, through the runner's ``ab`` mode (both suites in one child,
    whose ranks time both sides): still one process, as before issue 29."""
    kernels = sorted({pair.tasks[i].kernel for i in pair.deferred})
    wanted = {_key(pair.tasks[i]) for i in pair.deferred}
    legacy = replace(request, kernels=tuple(kernels))
    for record in run_together(legacy):
        case = record.case
        if (
            isinstance(record, ABMeasurement)
            and (
                case.kernel,
                case.workload,
                json.dumps(dict(case.params), sort_keys=True),
                case.dtype,
            )
            in wanted
        ):
            yield record


def _key(task: Task) -> tuple[str, str, str, str]:
    return task.kernel, task.workload, json.dumps(dict(task.params), sort_keys=True), task.dtype
