"""The node agent of a multi-node world: ``python -m kernelwatch.harness.distributed.agent --
COMMAND...``, the entry point of every pod of a multi-node pool's indexed Job
(infra/k8s/multi-node/).

On pod 0 (``NODE_RANK`` 0, or a single node) it executes ``COMMAND``: the flow run, whose
kernel child coordinates each case's ranks (``ranks.py``). On the other pods it serves that
coordinator: it connects to pod 0 on ``MASTER_PORT + 1`` (retrying while pod 0 starts or
between its runs), says which node it is, receives the suites' checkouts (``trees.py``) and
the global ranks to start, and starts them here (``rank.py``, local rank = global rank
modulo the GPUs per node) in the same sandbox as pod 0's children: an allow-listed
environment without the pod's secrets, a private home, the sandbox user. It then relays JSON
lines both ways: ``{"rank", "message"}`` from the coordinator onto that rank's stdin (the
plan in a rank's first line pointed at the local copies), and each rank's lines back as
``{"rank", "event"}``, then ``{"rank", "ended": exit code, "tail": stderr}`` at its end. When
the connection closes (the coordinator killed the world, or died) it kills its ranks and
connects again. It exits when pod 0's name stops resolving (pod 0 is gone) or on SIGTERM
(the Job's success policy ends it once pod 0 succeeds).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from kernelwatch.harness.distributed.nodes import Nodes
from kernelwatch.harness.isolation.sandbox import Sandbox, SandboxError, sandbox

# The rank protocol's helpers (ranks.py) import torch: only the other nodes' agents load
# them, so pod 0 starts the flow run without that second.

RANK = "kernelwatch.harness.distributed.rank"
#: Seconds between attempts to reach pod 0's coordinator.
RETRY_S = 0.5


def main(argv: list[str]) -> int:
    """Run ``COMMAND`` on node 0; serve pod 0's coordinator on the others."""
    command = argv[argv.index("--") + 1 :] if "--" in argv else []
    try:
        nodes = Nodes.from_env(os.environ)
    except ValueError as exc:
        print(f"kernelwatch node agent: {exc}", file=sys.stderr)
        return 2
    if nodes is None or nodes.node_rank == 0:
        if not command:
            print("kernelwatch node agent: node 0 runs the flow: give its command after --",
                  file=sys.stderr)  # fmt: skip
            return 2
        os.execvp(command[0], command)
    signal.signal(signal.SIGTERM, _exit)
    try:
        with sandbox() as box:
            serve(nodes, box)
    except SandboxError as exc:
        print(f"kernelwatch node agent: {exc}", file=sys.stderr)
        return 2
    return 0


def _exit(signum: int, frame: Any) -> None:
    raise SystemExit(0)  # unwinds through the session: its ranks are killed


def serve(nodes: Nodes, box: Sandbox) -> None:
    """Serve sessions of pod 0's coordinator until pod 0's name stops resolving."""
    resolved = False
    sessions = 0
    while True:
        try:
            sock = socket.create_connection((nodes.master_addr, nodes.agent_port), timeout=5)
        except socket.gaierror:
            if resolved:
                return  # pod 0 is gone: the run is over
            time.sleep(RETRY_S)
            continue
        except OSError:  # pod 0 is there, its coordinator not (yet, or between cases)
            resolved = True
            time.sleep(RETRY_S)
            continue
        resolved = True
        sessions += 1
        with sock:
            sock.settimeout(None)
            try:
                _session(sock, nodes, box, box.root / "nodes" / str(sessions))
            except Exception as exc:  # one world's failure; the next world is served afresh
                print(f"kernelwatch node agent: session {sessions}: {exc!r}", file=sys.stderr)


class _Link:
    """The connection to the coordinator, written by every rank's relay thread."""

    def __init__(self, sock: socket.socket) -> None:
        self.stream = sock.makefile("rwb")
        self.lock = threading.Lock()

    def send(self, message: dict[str, Any]) -> None:
        from kernelwatch.harness.distributed.ranks import write_line

        with self.lock:
            write_line(self.stream, message)


def _session(sock: socket.socket, nodes: Nodes, box: Sandbox, into: Path) -> None:
    """One world: start the ranks the coordinator names, relay until it hangs up, kill them."""
    from kernelwatch.harness.distributed import trees
    from kernelwatch.harness.distributed.ranks import decode_line, write_line

    link = _Link(sock)
    link.send({"node": nodes.node_rank})
    start = decode_line(link.stream.readline())
    if start is None:
        return
    moved = trees.unpack(start.get("trees", {}), into)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for rank in start["ranks"]:
            procs[rank] = _start_rank(rank, box, link)
        for line in iter(link.stream.readline, b""):
            message = decode_line(line) or {}
            proc = procs.get(message.get("rank"))  # type: ignore[arg-type]
            if proc is None or not isinstance(message.get("message"), dict):
                continue
            forward = message["message"]
            if "plan" in forward:
                forward = {**forward, "plan": _local_plan(forward["plan"], moved, box)}
            write_line(proc.stdin, forward)
    finally:
        for proc in procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_rank(rank: int, box: Sandbox, link: _Link) -> subprocess.Popen[bytes]:
    """Start one rank in the sandbox; a thread relays its lines, then how it ended."""
    stderr = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 (closed by the relay)
    proc = subprocess.Popen(
        box.command([sys.executable, "-m", RANK], own_pids=False),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=box.env(),
        cwd=box.home,
        start_new_session=True,
    )

    def relay(stream: IO[bytes]) -> None:
        from kernelwatch.harness.distributed.ranks import decode_line
        from kernelwatch.harness.isolation.child import tail

        for line in iter(stream.readline, b""):
            event = decode_line(line)
            if event is not None:
                link.send({"rank": rank, "event": event})
        link.send({"rank": rank, "ended": proc.wait(), "tail": tail(stderr)})
        stderr.close()

    assert proc.stdout is not None
    threading.Thread(target=relay, args=(proc.stdout,), daemon=True).start()
    return proc


def _local_plan(plan: dict[str, Any], moved: dict[str, str], box: Sandbox) -> dict[str, Any]:
    """The coordinator's plan with its suites read from this node's copies, where the
    sandboxed ranks can import them."""
    from kernelwatch.harness.distributed import trees
    from kernelwatch.harness.suite import SuiteRef

    local = dict(plan)
    for key in trees.SUITE_KEYS:
        if key in plan:
            ref = trees.relocate(SuiteRef.from_json(plan[key]), moved)
            local[key] = box.suite(ref).to_json()
    return local


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
