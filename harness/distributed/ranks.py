"""The kernel child's side of distributed cases: start a world's ranks, hand them each case,
and turn what they report (or fail to) into the case's record.

Ranks are processes of the kernel child's process group, so whatever kills the child (the
supervisor's case timeout) kills them too. One set of ranks serves every case of its world
size; after any failure it is killed and the next case of that world starts a fresh one.
A rank that raises or dies ends the case at once, recorded against that rank; the ranks
whose collective failed because of it (a peer's timeout or closed connection) are its
victims, not the culprits. A rank that hangs is caught by the case's deadline: the ranks
that neither finished nor failed by then are named as hung, each with the step it was in.

A world that spans nodes (``nodes.py``: pod 0 of a multi-node pool's Job) has its first node's
ranks here and the others' behind the node agents of the other pods (``agent.py``), which
connect to this process, receive the suites' checkouts (``trees.py``), start their local
ranks and relay each rank's lines both ways. A remote rank is handled like a local one, and
every failure names the node beside the rank; killing the world closes the agents'
connections, on which they kill their ranks.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from kernelwatch.harness.distributed import trees
from kernelwatch.harness.distributed.nodes import Nodes
from kernelwatch.harness.isolation.child import STDERR_TAIL, death
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


Events = queue.Queue[tuple[int, dict[str, Any] | None]]


class _Rank(ABC):
    """One rank as the coordinator sees it: the node it runs on, the step it last reported,
    and its outcome of the current command."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.step = "starting"
        self.outcome: dict[str, Any] | None = None

    @abstractmethod
    def send(self, message: dict[str, Any]) -> None:
        """Write one line to the rank."""

    @abstractmethod
    def kill(self) -> None:
        """End the rank (and whatever it started)."""

    @abstractmethod
    def ended(self) -> str:
        """How the rank ended (its output closed): ``died of signal SIGSEGV``."""

    @abstractmethod
    def tail(self) -> str:
        """The end of what the rank wrote on stderr."""


class _LocalRank(_Rank):
    """A rank process of this kernel child."""

    def __init__(self, proc: subprocess.Popen[bytes], stderr: IO[bytes]) -> None:
        super().__init__(node=0)
        self.proc, self.stderr = proc, stderr

    def send(self, message: dict[str, Any]) -> None:
        write_line(self.proc.stdin, message)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr.close()

    def ended(self) -> str:
        return death(self.proc.wait())

    def tail(self) -> str:
        from kernelwatch.harness.isolation.child import tail

        return "" if self.stderr.closed else tail(self.stderr)


class _Agent:
    """The connection to one other node's agent: JSON lines both ways (see ``agent.py``)."""

    def __init__(self, sock: socket.socket, node: int) -> None:
        self.sock, self.node = sock, node
        self.stream = sock.makefile("rwb")
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        with self.lock:
            write_line(self.stream, message)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class _RemoteRank(_Rank):
    """A rank another node's agent started; its lines come through the agent."""

    def __init__(self, agent: _Agent, rank: int) -> None:
        super().__init__(node=agent.node)
        self.agent, self.rank = agent, rank
        self.how = f"was lost: the agent of node {agent.node} went away"
        self.stderr = ""

    def send(self, message: dict[str, Any]) -> None:
        self.agent.send({"rank": self.rank, "message": message})

    def kill(self) -> None:
        self.agent.close()  # the agent kills its ranks when the connection closes

    def ended(self) -> str:
        return self.how

    def tail(self) -> str:
        return self.stderr


@dataclass
class _World:
    """One world's running ranks and the queue their events arrive on, tagged by rank."""

    world: World
    ranks: list[_Rank]
    events: Events
    store: tempfile.TemporaryDirectory[str]
    broken: bool = False

    def kill(self) -> None:
        for rank in self.ranks:
            rank.kill()
        self.store.cleanup()

    def name(self, index: int) -> str:
        """``rank 3 of 4``, with ``on node 1`` when the world spans nodes."""
        where = f" on node {self.ranks[index].node}" if self.world.nodes > 1 else ""
        return f"rank {index} of {len(self.ranks)}{where}"


@dataclass
class Ranks:
    """The worlds of one kernel child; ``run(op, task, suite)`` returns the task's record.

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
        # One set of ranks serves every single-node case; a world across nodes has its own.
        wanted = world if world.nodes > 1 else World(max(self.size, world.size))
        if self.running is None or self.running.broken or self.running.world != wanted:
            if self.running is not None:
                self.running.kill()
            self.starting()  # starting the ranks is not the case's time
            try:
                self.running = self._start(wanted)
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
                    rank.send({"op": "exit"})
            self.running.kill()
            self.running = None

    def lacking(self, world: World) -> str:
        """Why this device cannot host ``world``, or ""."""
        if world.nodes > 1:
            try:
                nodes = Nodes.from_env(os.environ)
            except ValueError as exc:
                return f"needs {world.nodes} nodes; {exc}"
            if nodes is None:
                return (
                    f"needs {world.nodes} nodes; multi-node cases run on a multi-node pool "
                    "(docs/DISTRIBUTED.md), not in one runner"
                )
            if nodes.nodes != world.nodes:
                return f"needs {world.nodes} nodes; this pool's Job has {nodes.nodes}"
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
        events: Events = queue.Queue()
        allowance = float(self.plan.get("startup_timeout_s", 180.0))
        startup = time.monotonic() + allowance
        nodes = Nodes.from_env(os.environ) if world.nodes > 1 else None
        hello = {
            "world": {"gpus_per_node": world.gpus_per_node, "nodes": world.nodes},
            "init_method": nodes.init_method if nodes else f"file://{store.name}/rendezvous",
            "join_timeout_s": allowance,
            "timeout_s": COLLECTIVE_SHARE * self.deadline_s,
            "plan": self.plan,
        }
        running = _World(world, [], events, store)
        for rank in range(world.gpus_per_node):
            stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (closed in kill)
            proc = subprocess.Popen(
                [sys.executable, "-m", RANK],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
            )
            running.ranks.append(_LocalRank(proc, stderr))
            _pump(rank, proc, events)
        if nodes is not None:
            try:
                running.ranks += _join_agents(nodes, world, events, self.plan, startup)
            except _Failed:
                running.kill()
                raise
        for rank, one in enumerate(running.ranks):
            one.send({**hello, "rank": rank, "local_rank": rank % world.gpus_per_node})
        self._wait(running, startup, "start-up")
        failed = tuple(
            i for i, r in enumerate(running.ranks) if (r.outcome or {}).get("event") != "ready"
        )
        if failed:
            running.kill()
            raise _Failed(f"{running.name(failed[0])} could not join the world", "", failed)
        for one in running.ranks:
            one.outcome = None
        return running

    def _command(self, running: _World, op: str, task: Task, case: CaseId, start: float) -> Outcome:
        for rank in running.ranks:
            rank.step, rank.outcome = "sent", None
            rank.send({"op": op, "task": task.to_json()})
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
        while True:
            pending = [i for i, r in enumerate(running.ranks) if r.outcome is None]
            if not pending:
                return
            try:
                index, event = running.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                failed = _hung(running, pending, what)
                running.kill()
                raise failed from None
            rank = running.ranks[index]
            if event is None:  # the rank closed its output: it died
                failed = _Failed(
                    f"{running.name(index)} {rank.ended()} during {rank.step}",
                    rank.tail(),
                    (index,),
                )
                running.kill()
                raise failed
            if event.get("event") == "step":
                rank.step = event["step"]
            elif event.get("event") == "error" and not event.get("comm"):
                running.kill()
                raise _Failed(
                    f"{running.name(index)} raised during {rank.step}: {event['message']}",
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


def _hung(running: _World, pending: list[int], what: str) -> _Failed:
    """The ranks still silent at the deadline are the hung ones (with their node when the
    world spans nodes); the ranks that gave up waiting on them are named as such."""
    nodes = running.world.nodes > 1

    def where(i: int) -> str:
        rank = running.ranks[i]
        return f"{i} (in {rank.step}{f', node {rank.node}' if nodes else ''})"

    names = ", ".join(where(i) for i in pending)
    size = len(running.ranks)
    reason = f"{'rank' if len(pending) == 1 else 'ranks'} {names} of {size} hung: no answer "
    reason += f"within the {what} deadline"
    for i, rank in enumerate(running.ranks):
        if rank.outcome is not None and rank.outcome.get("event") == "error":
            reason += f"; rank {i} gave up waiting: {rank.outcome['message']}"
    detail = "\n".join(f"--- rank {i} stderr ---\n{running.ranks[i].tail()}" for i in pending)
    return _Failed(reason[:2000], detail[-STDERR_TAIL:], tuple(pending))


def _join_agents(
    nodes: Nodes, world: World, events: Events, plan: dict[str, Any], deadline: float
) -> list[_Rank]:
    """Accept the agent of every other node by ``deadline``, hand each the suites' trees and
    its ranks to start, and return those ranks; raise :class:`_Failed` naming the nodes
    whose agent did not come."""
    agents: dict[int, _Agent] = {}
    with socket.create_server(("", nodes.agent_port), reuse_port=False) as server:
        while len(agents) < world.nodes - 1:
            server.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                sock, _ = server.accept()
            except TimeoutError:
                for agent in agents.values():
                    agent.close()
                missing = [n for n in range(1, world.nodes) if n not in agents]
                ranks = tuple(r for r in range(world.size) if r // world.gpus_per_node in missing)
                raise _Failed(
                    f"node {', '.join(map(str, missing))} of {world.nodes} did not join: no "
                    f"node agent connected to port {nodes.agent_port} within the start-up "
                    "allowance",
                    "",
                    ranks,
                ) from None
            agent = _greet(sock, world, agents)
            if agent is not None:
                agents[agent.node] = agent
    packed = trees.pack(plan)
    ranks: list[_Rank] = []
    for node, agent in sorted(agents.items()):
        first = node * world.gpus_per_node
        mine = list(range(first, first + world.gpus_per_node))
        remote = {r: _RemoteRank(agent, r) for r in mine}
        _relay(agent, remote, events)
        agent.send({"ranks": mine, "trees": packed})
        ranks += remote.values()
    return ranks


def _greet(sock: socket.socket, world: World, agents: dict[int, _Agent]) -> _Agent | None:
    """The agent on ``sock`` once it has said which node it is, or None (connection closed)
    for anything else: a node outside the world, or one already joined."""
    sock.settimeout(10.0)
    agent = _Agent(sock, -1)
    try:
        hello = decode_line(agent.stream.readline()) or {}
    except OSError:
        hello = {}
    node = hello.get("node")
    if not isinstance(node, int) or not 0 < node < world.nodes or node in agents:
        agent.close()
        return None
    sock.settimeout(None)
    agent.node = node
    return agent


def _relay(agent: _Agent, remote: dict[int, _RemoteRank], events: Events) -> None:
    """The agent's lines onto the shared queue: each of its ranks' events, and the end of
    each (how it ended, its stderr tail); when the connection closes, every rank of it not
    yet ended is lost."""

    def relay() -> None:
        live = set(remote)
        with contextlib.suppress(OSError, ValueError):  # the connection closed under it
            read_lines(live)
        for rank in sorted(live):
            events.put((rank, None))

    def read_lines(live: set[int]) -> None:
        for line in iter(agent.stream.readline, b""):
            message = decode_line(line) or {}
            rank = message.get("rank")
            if not isinstance(rank, int) or rank not in live:
                continue
            if isinstance(message.get("event"), dict):
                events.put((rank, message["event"]))
            elif "ended" in message:
                ended = message["ended"]
                remote[rank].how = death(ended) if isinstance(ended, int) else str(ended)
                remote[rank].stderr = str(message.get("tail", ""))[-STDERR_TAIL:]
                live.discard(rank)
                events.put((rank, None))

    threading.Thread(target=relay, daemon=True).start()


def write_line(stream: IO[bytes] | None, message: dict[str, Any]) -> None:
    """``message`` as one JSON line on ``stream``; nothing when the stream has closed (the
    process or connection behind it ended, which its reader reports)."""
    assert stream is not None
    with contextlib.suppress(OSError, ValueError):  # a closed pipe or socket: it ended
        stream.write((json.dumps(message) + "\n").encode())
        stream.flush()


def _pump(index: int, proc: subprocess.Popen[bytes], events: Events) -> None:
    """Each line the rank writes, decoded, onto the shared queue; None at its end. The ranks
    run inside the runner's sandbox: their lines reach the runner, which alone signs what
    goes to the supervisor."""
    assert proc.stdout is not None
    stream = proc.stdout

    def pump() -> None:
        for line in iter(stream.readline, b""):
            event = decode_line(line)
            if event is not None:
                events.put((index, event))
        events.put((index, None))

    threading.Thread(target=pump, daemon=True).start()


def decode_line(line: bytes) -> dict[str, Any] | None:
    """One event line as a JSON object, or None for anything else the rank printed."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None
