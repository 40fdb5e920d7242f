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
import weakref
from collections.abc import Sequence
from typing import IO, Any

from kernelwatch.harness.isolation import preload
from kernelwatch.harness.isolation.channel import Forged, Reader, new_key
from kernelwatch.harness.isolation.sandbox import Sandbox

#: What a child's event queue delivers: an event, a refused line, or None at end of output.
Item = dict[str, Any] | Forged | None
#: A started child: by ``exec``, or forked by a preload server (``preload.py``).
Process = subprocess.Popen[bytes] | preload.Forked

#: The children started and not yet reaped, so that a signal ending this process can end
#: them too (:func:`stop`).
_LIVE: set[Process] = set()
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
#: The most of a child's stderr ever kept on disk: a child writing gigabytes there must not
#: fill it. Trimmed back to ``STDERR_TAIL`` whenever it grows past this.
STDERR_CAP = 64 * 1024
#: How long a child's reaper has to kill what it left behind once told to (SIGTERM) before
#: it is killed too.
REAP_GRACE_S = 10.0
#: The longest line the result channel accepts: far above the largest record (a self-check
#: stage with its samples is a few MB), far below what would exhaust this process's memory
#: if kernel code wrote one endless line on the channel's descriptor.
MAX_LINE = 64 * 1024 * 1024

#: Per child (by pid): the thread copying its stderr into the caller's file, and the lock
#: that file is written and read under.
_STDERR: dict[int, tuple[threading.Thread, threading.Lock]] = {}
#: The lock of each file a stderr thread writes, for :func:`tail`.
_LOCKS: weakref.WeakKeyDictionary[IO[bytes], threading.Lock] = weakref.WeakKeyDictionary()


def spawn(
    module: str,
    plan: dict[str, Any],
    stderr: IO[bytes],
    box: Sandbox,
    env: dict[str, str] | None = None,
    keep_stdin: bool = False,
    wrapper: Sequence[str] = (),
) -> tuple[Process, queue.Queue[Item]]:
    """Start ``python -m module`` in ``box`` on ``plan`` (one JSON line on its stdin, with
    the key of its result channel), under ``wrapper`` (a profiler's command line) if given;
    its verified events arrive on the returned queue. The child's environment is the
    sandbox's (``env`` overrides it). Where it can, it is forked by the preload server of
    ``module`` (``preload.py``), which imported its libraries already; the same sandbox holds
    it either way. Its stdin is closed after the plan unless
    ``keep_stdin`` (a child that asks the parent questions). The child leads its own process
    group, so ``kill`` also ends whatever it started (a compiler, a kernel's helper
    processes); the sandbox's reaper (``jail.py``) ends even what left the group. What it
    writes on stderr reaches ``stderr`` through a pipe, of which only the last
    ``STDERR_CAP`` bytes are kept. Raises :class:`Stopped` after a stop signal."""
    check_stopped()
    key = new_key()
    env = env if env is not None else box.env()
    argv = [*wrapper, sys.executable, "-m", module]
    proc: Process | None = None
    if not wrapper and box.exchange is None and preload.enabled():
        proc = preload.start(module, box.launch(argv), env, str(box.home))
    if proc is None:
        proc = subprocess.Popen(
            box.command(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=box.home,
            start_new_session=True,
        )
    _LIVE.add(proc)
    assert proc.stderr is not None
    _STDERR[proc.pid] = _capped_copy(proc.stderr, stderr)
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


def _capped_copy(source: IO[bytes], target: IO[bytes]) -> tuple[threading.Thread, threading.Lock]:
    """Copy ``source`` to the end of ``target`` in a thread, trimming ``target`` to its last
    ``STDERR_TAIL`` bytes whenever it passes ``STDERR_CAP``."""
    lock = _LOCKS.setdefault(target, threading.Lock())

    def copy() -> None:
        with source:
            for chunk in iter(lambda: source.read1(STDERR_CAP), b""):
                with lock:
                    target.seek(0, os.SEEK_END)
                    target.write(chunk)
                    if target.tell() > STDERR_CAP:
                        target.seek(-STDERR_TAIL, os.SEEK_END)
                        kept = target.read()
                        target.seek(0)
                        target.write(kept)
                        target.truncate()
                    target.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread, lock


def _reaped(proc: Process) -> None:
    """Forget a reaped child; its stderr is copied to the end (its reaper killed every
    process that could still hold the pipe, so the end comes at once)."""
    _LIVE.discard(proc)
    copier = _STDERR.pop(proc.pid, None)
    if copier is not None:
        copier[0].join(timeout=REAP_GRACE_S)


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
        for line in iter(lambda: stream.readline(MAX_LINE), b""):
            if len(line) >= MAX_LINE and not line.endswith(b"\n"):
                items.put(Forged(f"a line of more than {MAX_LINE} bytes on the result channel"))
                return
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


def wait(proc: Process) -> int:
    """The exit code of a child that closed its output; killed if it lingers."""
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        kill(proc)
        return proc.wait()
    _reaped(proc)
    return code


def terminate(proc: Process, grace_s: float = REAP_GRACE_S) -> None:
    """End a child, everything it started and its process group: its reaper is asked first
    (SIGTERM), since a SIGKILL would leave it no time to kill what escaped the group; one
    that does not end in ``grace_s`` is killed with its group."""
    if proc.poll() is not None:
        return
    # The group, not the pid alone: whatever runs between this process and the reaper
    # (a runner's proxy, a profiler's wrapper) hears it too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def kill(proc: Process) -> None:
    """:func:`terminate` a child and reap it."""
    terminate(proc)
    _reaped(proc)


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
    with _LOCKS.get(stderr, contextlib.nullcontext()):
        stderr.flush()
        stderr.seek(0, os.SEEK_END)
        size = stderr.tell()
        stderr.seek(max(0, size - STDERR_TAIL))
        return stderr.read().decode(errors="replace").strip()
