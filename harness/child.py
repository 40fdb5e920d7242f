"""A child process that speaks signed JSON lines: start it on a plan in its sandbox, read its
events with a timeout, and when it dies or hangs, say how and keep the tail of what it wrote
on stderr. The correctness/timing runner and the build runner both run this way; the
sandbox is ``sandbox.py``, the signed channel ``channel.py``."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import IO, Any

from kernelwatch.harness.channel import Forged, Reader, new_key
from kernelwatch.harness.sandbox import Sandbox

#: What a child's event queue delivers: an event, a refused line, or None at end of output.
Item = dict[str, Any] | Forged | None

#: The children started and not yet reaped, so that a signal ending this process can end
#: them too (:func:`stop`).
_LIVE: set[subprocess.Popen[bytes]] = set()
#: The stop signal received, if any: no child starts after it.
_STOP: list[int] = []


class Stopped(BaseException):
    """A stop signal (SIGTERM, SIGINT, SIGHUP) ended this process's work. Raised once the
    records the killed children had already written are read, so none is lost."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: Bytes of a dead child's stderr kept in its records: enough for a segfault's Python
#: traceback after faulthandler's list of loaded extension modules (~2 KB with scipy).
STDERR_TAIL = 6000


def spawn(
    module: str,
    plan: dict[str, Any],
    stderr: IO[bytes],
    box: Sandbox,
    env: dict[str, str] | None = None,
    keep_stdin: bool = False,
    wrapper: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], queue.Queue[Item]]:
    """Start ``python -m module`` in ``box`` on ``plan`` (one JSON line on its stdin, with
    the key of its result channel), under ``wrapper`` (a profiler's command line) if given;
    its verified events arrive on the returned queue. The child's environment is the
    sandbox's (``env`` overrides it). Its stdin is closed after the plan unless
    ``keep_stdin`` (a child that asks the parent questions). The child leads its own process
    group, so ``kill`` also ends whatever it started (a compiler, a kernel's helper
    processes). Raises :class:`Stopped` after a stop signal."""
    check_stopped()
    key = new_key()
    proc = subprocess.Popen(
        box.command([*wrapper, sys.executable, "-m", module]),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=env if env is not None else box.env(),
        cwd=box.home,
        start_new_session=True,
    )
    _LIVE.add(proc)
    if _STOP:  # the signal came while it started, after stop() looked at _LIVE
        kill(proc)
        check_stopped()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps({**plan, "key": key}).encode() + b"\n")
    proc.stdin.flush()
    if not keep_stdin:
        proc.stdin.close()
    # A profiler wrapping the child prints its own lines on the same stdout: those are
    # skipped, not taken as forgeries (only the self-check's built-in suite runs wrapped).
    return proc, event_queue(proc.stdout, Reader(key), skip_unsigned=bool(wrapper))


def death(code: int) -> str:
    """How a child ended, from its exit code: a signal's name, or the code."""
    if code < 0:
        try:
            return f"died of signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with code {code}"


def event_queue(
    stream: IO[bytes], reader: Reader, skip_unsigned: bool = False
) -> queue.Queue[Item]:
    """Events from ``stream`` on a queue, so reads can time out: each line verified by
    ``reader``; the first line that fails is delivered as its :class:`Forged` error and
    nothing after it is read (with ``skip_unsigned``, such lines are dropped instead);
    ``None`` at EOF."""
    items: queue.Queue[Item] = queue.Queue()

    def pump() -> None:
        for line in iter(stream.readline, b""):
            try:
                items.put(reader.read(line))
            except Forged as refused:
                if skip_unsigned:
                    continue
                items.put(refused)
                return
        items.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return items


def wait(proc: subprocess.Popen[bytes]) -> int:
    """The exit code of a child that closed its output; killed if it lingers."""
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill(proc)
        return proc.wait()
    _LIVE.discard(proc)
    return code


def kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill a child and its process group, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    _LIVE.discard(proc)


def stop(signum: int) -> bool:
    """A stop signal's handler calls this: kill every child this process started and has
    not reaped, and start no other. True when there were children: their output then ends,
    and whoever reads it raises :class:`Stopped` after the last record (:func:`check_stopped`);
    with none, the caller raises it at once."""
    _STOP.append(signum)
    live = list(_LIVE)
    for proc in live:
        kill(proc)
    return bool(live)


def stop_requested() -> bool:
    """Whether a stop signal arrived."""
    return bool(_STOP)


def check_stopped() -> None:
    """Raise :class:`Stopped` if a stop signal arrived."""
    if _STOP:
        raise Stopped(_STOP[0])


def tail(stderr: IO[bytes]) -> str:
    """The last ``STDERR_TAIL`` bytes a child wrote to ``stderr`` (a temporary file)."""
    stderr.flush()
    stderr.seek(0, os.SEEK_END)
    size = stderr.tell()
    stderr.seek(max(0, size - STDERR_TAIL))
    return stderr.read().decode(errors="replace").strip()
