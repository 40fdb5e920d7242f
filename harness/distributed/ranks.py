"""The runner child's side of distributed cases: start a world's ranks, hand them each case,
and turn what they report (or fail to) into the case's record.

Ranks are processes of the runner child's process group, so whatever kills the child (the
supervisor's case timeout) kills them too. One set of ranks serves every case of its world
size; after any failure it is killed and the next case of that world starts a fresh one.
A rank that raises or dies ends the case at once, recorded against that rank; the ranks
whose collective failed because of it (a peer's timeout or closed connection) are its
victims, not the culprits. A rank that hangs is caught by the case's deadline: the ranks
that neither finished nor failed by then are named as hung, each with the step it was in.
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from kernelwatch.harness.child import STDERR_TAIL, death
from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    CorrectnessResult,
    DeviceInfo,
    Measurement,
    Method,
    SoftwareInfo,
    WorldInfo,
    read_record,
)
from kernelwatch.harness.spec import World
from kernelwatch.harness.suite import Task

RANK = "kernelwatch.harness.distributed.rank"
#: A rank's collectives give up after this share of the case's deadline, so the ranks left
#: waiting on a hung one say so before the deadline names the hung one.
COLLECTIVE_SHARE = 0.5
#: The most processes a world may have on the CPU, where ranks are processes, not GPUs.
CPU_MAX_RANKS = 16

Outcome = CorrectnessResult | Measurement | ABMeasurement


@dataclass
class _Rank:
    proc: subprocess.Popen[bytes]
    stderr: IO[bytes]
    step: str = "starting"
    outcome: dict[str, Any] | None = None


@dataclass
class _World:
    """One world's running ranks and the queue their events arrive on, tagged by rank."""

    ranks: list[_Rank]
    events: queue.Queue[tuple[int, dict[str, Any] | None]]
    store: tempfile.TemporaryDirectory[str]
    broken: bool = False

    def kill(self) -> None:
        for rank in self.ranks:
            if rank.proc.poll() is None:
                rank.proc.kill()
            rank.proc.wait()
            rank.stderr.close()
        self.store.cleanup()


@dataclass
class Ranks:
    """The worlds of one runner child; ``run(op, task, suite)`` returns the task's record.

    ``plan`` is the runner's plan (suites, seed, bench options, case timeout); ``device``,
    ``software`` and ``method`` fill the records the ranks could not make; ``starting``
    tells the supervisor that ranks are being started (their start-up has its own time);
    ``size`` is the plan's largest world: one set of ranks that size serves every case."""

    plan: dict[str, Any]
    device: DeviceInfo
    software: SoftwareInfo
    starting: Callable[[], None]
    method: Method | None = None
    size: int = 0
    running: _World | None = None
    #: The world each size last reported, kept on the records of its failures so they land
    #: in the same series as its measurements.
    seen: dict[int, WorldInfo] = field(default_factory=dict)

    @property
    def deadline_s(self) -> float:
        return 0.8 * float(self.plan.get("case_timeout_s", 300.0))

    def run(self, op: str, task: Task, suite: str) -> Outcome:
        """Run ``task`` on the ranks (started if need be) and return its record."""
        case = CaseId(suite, task.kernel, task.workload, dict(task.params), task.dtype)
        world = World.of(task.params)
        start = time.perf_counter()
        lacking = self.lacking(world)
        if lacking:
            return self._record(op, task, case, "unsupported", lacking, "", (), start)
        if self.running is None or self.running.broken:
            if self.running is not None:
                self.running.kill()
            self.starting()  # starting the ranks is not the case's time
            try:
                self.running = self._start(World(max(self.size, world.size)))
            except _Failed as failed:
                self.running = None
                return self._record(op, task, case, "error", failed.reason, failed.detail,
                                    failed.ranks, start)  # fmt: skip
        return self._command(self.running, op, task, case, start)

    def close(self) -> None:
        """Stop the ranks."""
        if self.running is not None:
            with contextlib.suppress(OSError):
                for rank in self.running.ranks:
                    _send(rank, {"op": "exit"})
            self.running.kill()
            self.running = None

    def lacking(self, world: World) -> str:
        """Why this device cannot host ``world``, or ""."""
        if world.nodes > 1:
            return (
                f"needs {world.nodes} nodes; multi-node cases run on a multi-node pool "
                "(docs/DISTRIBUTED.md), not in one runner"
            )
        if self.device.kind == "cuda":
            import torch

            have = torch.cuda.device_count()
            if world.gpus_per_node > have:
                return f"needs {world.gpus_per_node} GPUs on one node; this node has {have}"
        elif world.gpus_per_node > CPU_MAX_RANKS:
            return f"needs {world.gpus_per_node} ranks; the CPU runs at most {CPU_MAX_RANKS}"
        return ""

    def _start(self, world: World) -> _World:
        store = tempfile.TemporaryDirectory(prefix="kw-world-")
        events: queue.Queue[tuple[int, dict[str, Any] | None]] = queue.Queue()
        ranks = []
        hello = {
            "world": {"gpus_per_node": world.gpus_per_node, "nodes": world.nodes},
            "init_method": f"file://{store.name}/rendezvous",
            "timeout_s": COLLECTIVE_SHARE * self.deadline_s,
            "plan": self.plan,
        }
        for rank in range(world.size):
            stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (closed in kill)
            proc = subprocess.Popen(
                [sys.executable, "-m", RANK],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
            ranks.append(_Rank(proc, stderr))
            _pump(rank, proc, events)
            _send(ranks[-1], {**hello, "rank": rank, "local_rank": rank})
        running = _World(ranks, events, store)
        startup = float(self.plan.get("startup_timeout_s", 180.0))
        self._wait(running, time.monotonic() + startup, "start-up")
        failed = tuple(i for i, r in enumerate(ranks) if (r.outcome or {}).get("event") != "ready")
        if failed:
            running.kill()
            raise _Failed(f"rank {failed[0]} of {world.size} could not join the world", "", failed)
        for rank in ranks:
            rank.outcome = None
        return running

    def _command(self, running: _World, op: str, task: Task, case: CaseId, start: float) -> Outcome:
        for rank in running.ranks:
            rank.step, rank.outcome = "sent", None
            _send(rank, {"op": op, "task": task.to_json()})
        try:
            self._wait(running, time.monotonic() + self.deadline_s, "case")
        except _Failed as failed:
            running.broken = True
            return self._record(op, task, case, "error", failed.reason, failed.detail,
                                failed.ranks, start)  # fmt: skip
        outcomes = [r.outcome or {} for r in running.ranks]
        gave_up = tuple(i for i, o in enumerate(outcomes) if o.get("event") == "error")
        if gave_up:  # every rank gave up on another: none stands out
            running.broken = True
            reason = "; ".join(f"rank {i}: {outcomes[i]['message']}" for i in gave_up)
            return self._record(op, task, case, "error", reason[:2000], "", gave_up, start)
        unsupported = [o["message"] for o in outcomes if o.get("event") == "unsupported"]
        if unsupported:
            if len(unsupported) < len(outcomes):
                running.broken = True  # the others went on into a collective alone
            return self._record(op, task, case, "unsupported", unsupported[0], "", (), start)
        record = read_record(outcomes[0]["record"])
        expected = {"check": CorrectnessResult, "bench": Measurement, "ab": ABMeasurement}[op]
        if not isinstance(record, expected) or record.case != case:  # a protocol bug
            running.broken = True
            return self._record(op, task, case, "error", "rank 0 reported another case", "",
                                (0,), start)  # fmt: skip
        world = record.base.world if isinstance(record, ABMeasurement) and record.base else None
        world = getattr(record, "world", None) or world
        if world is not None:
            self.seen[world.world_size] = world
        return record

    def _wait(self, running: _World, deadline: float, what: str) -> None:
        """Read events until every rank has an outcome (ready, done, unsupported, or gave
        up on a peer); raise :class:`_Failed`, the ranks killed, naming a rank that raised,
        died, or hung past ``deadline``."""
        size = len(running.ranks)
        while True:
            pending = [i for i, r in enumerate(running.ranks) if r.outcome is None]
            if not pending:
                return
            try:
                index, event = running.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                failed = _hung(running, pending, size, what)
                running.kill()
                raise failed from None
            rank = running.ranks[index]
            if event is None:  # the rank closed its output: it died
                code = rank.proc.wait()
                failed = _Failed(
                    f"rank {index} of {size} {death(code)} during {rank.step}",
                    _tail(rank),
                    (index,),
                )
                running.kill()
                raise failed
            if event.get("event") == "step":
                rank.step = event["step"]
            elif event.get("event") == "error" and not event.get("comm"):
                running.kill()
                raise _Failed(
                    f"rank {index} of {size} raised during {rank.step}: {event['message']}",
                    event.get("detail", ""),
                    (index,),
                )
            else:
                rank.outcome = event

    def _record(
        self,
        op: str,
        task: Task,
        case: CaseId,
        status: str,
        reason: str,
        detail: str,
        failed: tuple[int, ...],
        start: float,
    ) -> Outcome:
        """A record the ranks could not make: unsupported, or an error naming ranks."""
        world = self.seen.get(World.of(task.params).size)
        common = {
            "case": case,
            "reason": reason,
            "device": self.device,
            "software": self.software,
            "duration_s": time.perf_counter() - start,
            "detail": detail,
        }
        if op == "check":
            verdict = "unsupported" if status == "unsupported" else "error"
            return CorrectnessResult(
                verdict=verdict, tolerance=task.tolerance, seed=int(self.plan["seed"]),
                failed_ranks=failed, world=world, **common,
            )  # fmt: skip
        assert self.method is not None
        if op == "ab":
            return ABMeasurement(status=status, method=self.method, **common)
        return Measurement(
            status=status, method=self.method, failed_ranks=failed, world=world, **common
        )


class _Failed(Exception):
    def __init__(self, reason: str, detail: str, ranks: tuple[int, ...]) -> None:
        super().__init__(reason)
        self.reason, self.detail, self.ranks = reason, detail, ranks


def _hung(running: _World, pending: list[int], size: int, what: str) -> _Failed:
    """The ranks still silent at the deadline are the hung ones; the ranks that gave up
    waiting on them are named as such."""
    names = ", ".join(f"{i} (in {running.ranks[i].step})" for i in pending)
    reason = f"{'rank' if len(pending) == 1 else 'ranks'} {names} of {size} hung: no answer "
    reason += f"within the {what} deadline"
    for i, rank in enumerate(running.ranks):
        if rank.outcome is not None and rank.outcome.get("event") == "error":
            reason += f"; rank {i} gave up waiting: {rank.outcome['message']}"
    detail = "\n".join(f"--- rank {i} stderr ---\n{_tail(running.ranks[i])}" for i in pending)
    return _Failed(reason[:2000], detail[-STDERR_TAIL:], tuple(pending))


def _send(rank: _Rank, message: dict[str, Any]) -> None:
    assert rank.proc.stdin is not None
    with contextlib.suppress(BrokenPipeError):
        rank.proc.stdin.write((json.dumps(message) + "\n").encode())
        rank.proc.stdin.flush()


def _pump(index: int, proc: subprocess.Popen[bytes], events: queue.Queue[tuple[int, Any]]) -> None:
    """Each line the rank writes, decoded, onto the shared queue; None at its end. The ranks
    run inside the runner's sandbox: their lines reach the runner, which alone signs what
    goes to the supervisor."""
    assert proc.stdout is not None
    stream = proc.stdout

    def pump() -> None:
        for line in iter(stream.readline, b""):
            event = _decode(line)
            if event is not None:
                events.put((index, event))
        events.put((index, None))

    threading.Thread(target=pump, daemon=True).start()


def _decode(line: bytes) -> dict[str, Any] | None:
    """One event line as a JSON object, or None for anything else the rank printed."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def _tail(rank: _Rank) -> str:
    from kernelwatch.harness.child import tail

    if rank.stderr.closed:
        return ""
    return tail(rank.stderr)
