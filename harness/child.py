"""A child process that speaks JSON lines: start it on a plan, read its events with a
timeout, and when it dies or hangs, say how and keep the tail of what it wrote on stderr.
The correctness/timing runner and the build runner both run this way."""

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
    env: dict[str, str] | None = None,
    wrapper: Sequence[str] = (),
) -> tuple[subprocess.Popen[bytes], queue.Queue[bytes | None]]:
    """Start ``python -m module`` on ``plan`` (JSON on its stdin), under ``wrapper`` (a
    profiler's command line) if given; its stdout lines arrive on the returned queue. The
    child leads its own process group, so ``kill`` also ends whatever it started (a
    compiler, a kernel's helper processes). Raises :class:`Stopped` after a stop signal."""
    check_stopped()
    proc = subprocess.Popen(
        [*wrapper, sys.executable, "-m", module],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        env=env,
        start_new_session=True,
    )
    _LIVE.add(proc)
    if _STOP:  # the signal came while it started, after stop() looked at _LIVE
        kill(proc)
        check_stopped()
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(json.dumps(plan).encode())
    proc.stdin.close()
    return proc, line_queue(proc.stdout)


def death(code: int) -> str:
    """How a child ended, from its exit code: a signal's name, or the code."""
    if code < 0:
        try:
            return f"died of signal {signal.Signals(-code).name}"
        except ValueError:
            return f"died of signal {-code}"
    return f"exited with code {code}"


def decode(line: bytes) -> dict[str, Any] | None:
    """One event line as a JSON object, or None for anything else the child printed."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def line_queue(stream: IO[bytes]) -> queue.Queue[bytes | None]:
    """Lines from ``stream`` on a queue, ``None`` at EOF, so reads can time out."""
    lines: queue.Queue[bytes | None] = queue.Queue()

    def pump() -> None:
        for line in iter(stream.readline, b""):
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


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
