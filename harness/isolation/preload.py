"""Children that start from a fork of a process that imported their libraries already.

Every kernel child and build worker imports torch, numpy, scipy and Triton before its work:
about 2 s of CPU each on a 2-core VM, and a nightly with an A/B and a bisection starts dozens
(docs/TESTING.md counted 219 over the test suite, 440 of its 1,010 CPU seconds). A *preload
server* imports them once, for one child module and one environment, and forks a process
per child: the fork makes the same namespaces ``unshare`` would (:func:`jail.unshare`), runs
``jail.py``'s mounts and reaper in-process, and where ``jail.py`` would ``exec`` the child's
Python, runs the module (``runpy``) in the fork, already dropped to the sandbox user. What
holds for a child started by ``exec`` holds for it: the same :class:`~sandbox.Launch`, the
same jail, the same channel, stdin, stdout and stderr; :class:`Forked` answers as
``subprocess.Popen`` does.

What the server holds is what a child would have imported itself: it is started with the
child's environment less what differs per sandbox (``PER_CHILD``, set in each fork), never
the parent's (no secret reaches it), imports no kernel code and no suite, and never touches
a GPU: CUDA is initialised in the child, after the fork, where it works. Triton is imported
beforehand only where its mode is known before the child runs (the interpreter's, on a torch
without a GPU build, which is what ``device.select_device`` would pick; a build worker's
compiler). A child writes nothing the server reads back but its exit status.

Off with ``KERNELWATCH_PRELOAD=0``; children then start by ``exec`` as before, as they do
under a profiler's wrapper, and wherever a server cannot start (it says
why on the parent's stderr once).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import random
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from kernelwatch.harness.isolation import jail
from kernelwatch.harness.isolation.quick_exit import quick_exit
from kernelwatch.harness.isolation.sandbox import Launch

#: ``0`` turns preloading off: every child starts by ``exec``.
ENV = "KERNELWATCH_PRELOAD"
#: What differs between children of one environment (``sandbox.child_env``): set in each
#: fork, so one server serves every sandbox. No library reads them while it is imported.
PER_CHILD = frozenset(
    {"HOME", "TMPDIR", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME",
     "TRITON_CACHE_DIR", "USER", "LOGNAME"}
)  # fmt: skip
KERNEL_CHILD = "kernelwatch.harness.isolation.kernel_child"
BUILD_WORKER = "kernelwatch.harness.build.worker"
#: The children worth a server: each imports torch before its work. Any other module (a
#: test's, a small helper) starts by ``exec``, cheaper than a server's imports.
MODULES = frozenset({KERNEL_CHILD, BUILD_WORKER})
#: What a child of these modules imports before its first case, kernels and suites aside.
#: None of them starts a thread, opens a device or reads ``PER_CHILD``.
COMMON = (
    "torch", "numpy", "scipy.special", "kernelwatch.harness.records",
    "kernelwatch.harness.device", "kernelwatch.harness.suite", "kernelwatch.harness.spec",
    "kernelwatch.harness.launcher", "kernelwatch.harness.correctness",
    "kernelwatch.harness.timing.case", "kernelwatch.harness.timing.ab",
    "kernelwatch.harness.timing.roofline", "kernelwatch.harness.isolation.channel",
    "kernelwatch.harness.isolation.kernel_child",
)  # fmt: skip
#: What a build child imports beyond ``COMMON`` (see ``preload``).
BUILD_IMPORTS = (
    "triton.compiler", "triton.compiler.code_generator", "torch._dynamo",
    "kernelwatch.harness.build.plan",
    "kernelwatch.harness.build.compiler",
)  # fmt: skip
#: The largest request (a launch's spec and an environment): far above either.
MAX_REQUEST = 1 << 20
#: How long the parent waits for a server to import its libraries before it gives up on it.
START_TIMEOUT_S = 120.0


class Forked:
    """A child forked by a preload server, as ``subprocess.Popen`` shows one: its pid (it
    leads its own session and process group), its pipes, and its exit code (negative: the
    signal that ended it), which the server writes on a pipe of its own when it reaps it."""

    def __init__(
        self, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes], status: int
    ) -> None:
        self.pid = pid
        self.stdin: IO[bytes] | None = stdin
        self.stdout: IO[bytes] | None = stdout
        self.stderr: IO[bytes] | None = stderr
        self.returncode: int | None = None
        self._status = status
        self._lock = threading.Lock()

    def poll(self) -> int | None:
        """The exit code if the child has ended, else None."""
        return self._read(0.0)

    def wait(self, timeout: float | None = None) -> int:
        """The exit code, once the child ends; ``subprocess.TimeoutExpired`` after
        ``timeout`` seconds."""
        code = self._read(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"preloaded child {self.pid}", timeout or 0.0)
        return code

    def _read(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            if not select.select([self._status], [], [], timeout)[0]:
                return None
            data = b""
            while len(data) < 4:
                chunk = os.read(self._status, 4 - len(data))
                if not chunk:
                    break
                data += chunk
            os.close(self._status)
            # A server that died before it reaped the child cannot say; its children died
            # with it (their reapers' parent), so the child counts as killed.
            status = struct.unpack("i", data)[0] if len(data) == 4 else signal.SIGKILL
            self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode


@dataclass
class _Server:
    """A preload server this process started, and the socket it takes requests on."""

    proc: subprocess.Popen[bytes]
    sock: socket.socket
    extra: dict[str, str]
    lock: threading.Lock = field(default_factory=threading.Lock)


#: The servers of this process, by (module, environment less ``PER_CHILD``); None where one
#: could not start (its children start by ``exec``).
_SERVERS: dict[tuple[str, tuple[tuple[str, str], ...]], _Server | None] = {}
_SERVERS_LOCK = threading.Lock()
#: The process that started the servers above: a fork of it must start its own.
_OWNER = [os.getpid()]


def enabled() -> bool:
    """Whether children start from a preload server (``KERNELWATCH_PRELOAD``, default on)."""
    return os.environ.get(ENV, "1") != "0"


def start(module: str, launch: Launch, env: Mapping[str, str], cwd: str) -> Forked | None:
    """Start ``python -m module`` as ``launch`` says, with ``env`` in ``cwd``, forked from the
    server for this module and environment (started on first use): pipes for its stdin,
    stdout and stderr, in a session of its own. None where no server can serve it: the
    caller starts it by ``exec``."""
    if module not in MODULES:
        return None
    server = _server(module, env)
    if server is None:
        return None
    ends = [os.pipe() for _ in range(4)]  # stdin, stdout, stderr, exit status
    theirs = [ends[0][0], ends[1][1], ends[2][1], ends[3][1]]
    ours = [ends[0][1], ends[1][0], ends[2][0], ends[3][0]]
    request = {
        "launch": {"unshare": list(launch.unshare), "spec": launch.spec, "argv": list(launch.argv)},
        "env": {**env, **server.extra},
        "cwd": cwd,
    }
    try:
        with server.lock:
            socket.send_fds(server.sock, [json.dumps(request).encode()], theirs)
            answer = json.loads(server.sock.recv(MAX_REQUEST) or b'{"error": "the server ended"}')
    except (OSError, ValueError) as exc:
        answer = {"error": str(exc)}
    finally:
        for fd in theirs:
            os.close(fd)
    if "pid" not in answer:
        for fd in ours:
            os.close(fd)
        _give_up(module, env, f"it could not fork a child ({answer.get('error')})")
        return None
    return Forked(
        answer["pid"],
        os.fdopen(ours[0], "wb"),
        os.fdopen(ours[1], "rb"),
        os.fdopen(ours[2], "rb"),
        ours[3],
    )


def _key(module: str, env: Mapping[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return module, tuple(sorted((k, v) for k, v in env.items() if k not in PER_CHILD))


def _server(module: str, env: Mapping[str, str]) -> _Server | None:
    key = _key(module, env)
    with _SERVERS_LOCK:
        if _OWNER[0] != os.getpid():  # a fork of the process that started them
            _SERVERS.clear()
            _OWNER[0] = os.getpid()
        if key not in _SERVERS:
            _SERVERS[key] = _start_server(module, dict(key[1]))
        return _SERVERS[key]


def _start_server(module: str, env: dict[str, str]) -> _Server | None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", __name__, module, str(theirs.fileno())],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=[theirs.fileno()],
            env=env,
            cwd="/",
            start_new_session=True,
        )
    except OSError as exc:
        ours.close()
        _warn(module, f"it could not start ({exc})")
        return None
    finally:
        theirs.close()
    ours.settimeout(START_TIMEOUT_S)
    try:
        ready = json.loads(ours.recv(MAX_REQUEST) or b'{"error": "it exited"}')
    except (OSError, ValueError) as exc:
        ready = {"error": str(exc)}
    if "extra" not in ready:
        ours.close()
        proc.kill()
        proc.wait()
        _warn(module, f"it could not import its libraries ({ready.get('error')})")
        return None
    ours.settimeout(None)
    if not any(_SERVERS.values()):  # the first: this process's exit ends them all
        atexit.register(stop_servers)
    return _Server(proc, ours, ready["extra"])


def _give_up(module: str, env: Mapping[str, str], why: str) -> None:
    """Stop using a server that failed (its children start by ``exec`` from now on)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get(_key(module, env))
        _SERVERS[_key(module, env)] = None
    if server is not None:
        server.sock.close()
        server.proc.kill()
        server.proc.wait()
    _warn(module, why)


def _warn(module: str, why: str) -> None:
    sys.stderr.write(
        f"kernelwatch: the preload server of {module} is not used: {why}; its children start "
        f"by exec (slower, as safe)\n"
    )


def stop_servers() -> None:
    """End this process's servers and reap them (their children go on: each is its
    reaper's). Run at this process's exit."""
    with _SERVERS_LOCK:
        servers = [s for s in _SERVERS.values() if s is not None]
        _SERVERS.clear()
    for server in servers:
        server.sock.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.proc.wait(timeout=5)


# The server's side: runs as ``python -m kernelwatch.harness.isolation.preload MODULE FD``.


def preload(module: str) -> dict[str, str]:
    """Import what a child of ``module`` imports first (``COMMON``, Triton where its mode is
    known now); the variables every fork's environment must add (Triton's interpreter, set
    here as ``device.select_device`` would set it in the child)."""
    import torch

    extra: dict[str, str] = {}
    gpu_build = torch.version.cuda is not None or torch.version.hip is not None
    if module == KERNEL_CHILD and not gpu_build:
        extra["TRITON_INTERPRET"] = "1"
    os.environ.update(extra)
    for name in COMMON:
        if name != module:
            importlib.import_module(name)
    if os.environ.get("TRITON_INTERPRET") == "1":
        importlib.import_module("kernelwatch.harness.interpreter")
    elif module == BUILD_WORKER:
        # What every build child imports: the compiler, its planner, and ``torch._dynamo``,
        # which torch's meta-device decompositions (a spec's ``torch.randn(..., device=meta)``,
        # a host wrapper's arithmetic) import on their first call: 1.4 s of CPU a child.
        for name in BUILD_IMPORTS:
            importlib.import_module(name)
    return extra


def serve(module: str, sock: socket.socket) -> None:
    """Fork a child per request until the parent closes ``sock``; write each child's wait
    status on the status pipe its request handed over once it is reaped."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    own = {sock.fileno(), wake_r, wake_w}
    statuses: dict[int, int] = {}
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            with contextlib.suppress(ChildProcessError):
                while (reaped := os.waitpid(-1, os.WNOHANG))[0]:
                    status_fd = statuses.pop(reaped[0], None)
                    if status_fd is not None:
                        with contextlib.suppress(OSError):
                            os.write(status_fd, struct.pack("i", reaped[1]))
                        os.close(status_fd)
        if sock in ready:
            try:
                message, fds, _, _ = socket.recv_fds(sock, MAX_REQUEST, 4)
            except OSError:
                message, fds = b"", []
            if not message:
                return
            try:
                request = json.loads(message)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
            except (OSError, ValueError) as exc:
                for fd in fds:
                    os.close(fd)
                sock.send(json.dumps({"error": str(exc)}).encode())
                continue
            if pid == 0:
                _child(module, request, fds, own | set(statuses.values()))
            for fd in fds[:3]:
                os.close(fd)
            statuses[pid] = fds[3]
            sock.send(json.dumps({"pid": pid}).encode())


def _child(module: str, request: dict[str, Any], fds: list[int], close: set[int]) -> None:
    """In a fork of the server: become what ``subprocess.Popen`` of the launch's command
    would have started, then run the jail, which runs ``module`` in place of ``exec``.
    Never returns."""
    code = 127
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in {*fds, *close}:
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        # Where temporary files go is the child's (its TMPDIR): ``torch._dynamo``'s import
        # asked ``tempfile`` in the server, which keeps the answer.
        tempfile.tempdir = None
        os.chdir(request["cwd"])
        launch = request["launch"]
        if launch["unshare"]:
            # As ``unshare`` would be: an undumpable process's /proc files are root's, and
            # it could not write its user namespace's maps (the jail makes itself
            # undumpable again).
            jail.set_dumpable(True)
            jail.unshare(launch["unshare"])
        argv = [json.dumps(launch["spec"]), "--", *launch["argv"]]
        code = jail.main(argv, run=lambda: _run(module))
    except BaseException:
        traceback.print_exc()
    _exit(code)


def _run(module: str) -> None:
    """Run ``module`` as ``python -m`` would, in the jail's child; never returns."""
    code: Any = 0
    try:
        jail.set_dumpable(True)  # as its own exec would have made it
        random.seed()  # as a fresh interpreter's, not the server's
        import numpy

        numpy.random.seed()
        sys.argv = [module]  # its file, once runpy finds it
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        traceback.print_exc()
        code = 1
    quick_exit(code)  # what the interpreter's exit would do, without its teardown


def _exit(code: int) -> None:
    with contextlib.suppress(BaseException):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    """``MODULE FD``: preload ``MODULE``'s libraries, say so on the socket ``FD``, serve."""
    module, fd = argv[0], int(argv[1])
    sock = socket.socket(fileno=fd)
    jail.set_dumpable(False)
    try:
        extra = preload(module)
    except BaseException as exc:
        sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        return 1
    sock.send(json.dumps({"extra": extra}).encode())
    serve(module, sock)
    return 0


if __name__ == "__main__":
    # Without the interpreter's shutdown: tearing down torch's, Triton's and numpy's modules
    # cost 0.6-1.4 s of CPU a server, which its parent waits for as it exits; a server holds
    # nothing to flush but its streams (its children are their own processes).
    _exit(main(sys.argv[1:]))
