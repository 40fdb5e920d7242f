"""The first step of every sandboxed child: ``[unshare ... --] python -m kernelwatch.harness.jail
SPEC -- ARGV...``.

As root, in its own mount namespace, it hides what the sandbox user must not see and makes
reachable what it must (the Python installation under root's private home, a checkout under
a private directory): a tmpfs over each directory that blocks the way, and the needed
directories bound back at their own paths. SPEC without a ``uid`` (a worker that is not
root) skips all that.

It then stays as the child's reaper: a child subreaper that forks ``ARGV`` (dropped to the
sandbox user for good, no groups, no new privileges, under resource limits), and when it
ends or this process is sent SIGTERM, kills every process left below it, even one that
double-forked and called ``setsid``, before exiting the way ``ARGV`` did. As root the reaper
stays root, so kernel code cannot signal it. Nothing here imports kernel code.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys
from pathlib import Path

_MS_BIND, _MS_REC, _MS_NOSUID, _MS_NODEV = 4096, 16384, 2, 4
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER = 38, 36
#: The largest file kernel code may write: a kernel has no reason to write more, and a
#: hostile one must not fill the host's disk.
FILE_LIMIT = 1 << 30
#: The processes (threads count) the sandbox user may have, all its children together: room
#: for several children with a thread per core each, not for a fork bomb.
PROCESS_LIMIT = 8192
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    encode = lambda s: s.encode() if s is not None else None  # noqa: E731
    if _libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def _searchable(path: Path, uid: int, gid: int) -> bool:
    info = path.stat()
    if info.st_uid == uid:
        return bool(info.st_mode & 0o100)
    if info.st_gid == gid:
        return bool(info.st_mode & 0o010)
    return bool(info.st_mode & 0o001)


def expose(path: Path, held: int, uid: int, gid: int) -> None:
    """Make the directory ``path`` (open as ``held``) reachable by ``uid``: each ancestor that
    is not searchable is covered by a tmpfs, and ``path`` is bound back at its own path."""
    for ancestor in [*reversed(path.parents)][1:]:
        if not ancestor.exists():
            ancestor.mkdir()  # inside a tmpfs mounted above
        elif not _searchable(ancestor, uid, gid):
            _mount("tmpfs", str(ancestor), "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
    if path.exists() and os.path.samestat(path.stat(), os.fstat(held)):
        return
    path.mkdir(exist_ok=True)
    _mount(f"/proc/self/fd/{held}", str(path), None, _MS_BIND | _MS_REC, None)


def loopback_up() -> None:
    """Bring up the loopback interface of this process's network namespace. A fresh
    namespace has no interface but a ``lo`` that is down; up, it reaches only this
    namespace's own sockets (a distributed case's ranks rendezvous there), never the host's
    services. Needs CAP_NET_ADMIN in the namespace: OSError otherwise."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        if not flags & _IFF_UP:
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def hide(paths: list[str]) -> None:
    """Cover each of ``paths`` that exists: a directory with an empty tmpfs, a file with
    ``/dev/null``."""
    for hidden in paths:
        path = Path(hidden)
        if path.is_dir():
            _mount("tmpfs", hidden, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
        elif path.exists():
            _mount("/dev/null", hidden, None, _MS_BIND, None)


def limit(spec: dict[str, object]) -> None:
    """The resource limits of the child: no core dumps, no file over ``FILE_LIMIT``, and with
    a sandbox user of its own (``uid``) no more than ``PROCESS_LIMIT`` processes for it.
    Without a sandbox user the count would be the worker's own uid's, which other work
    shares. Address space is not limited: CUDA reserves far more virtual memory than it
    uses, and an RLIMIT_AS would break every GPU run."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    if spec.get("uid") is not None:
        resource.setrlimit(resource.RLIMIT_NPROC, (PROCESS_LIMIT, PROCESS_LIMIT))


def children() -> list[int]:
    """The processes whose parent is this one (orphans below a subreaper become its own)."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue  # gone meanwhile
        # The command name in parentheses may hold anything, spaces and parentheses too.
        if int(stat[stat.rindex(b")") + 2 :].split()[1]) == me:
            found.append(int(entry))
    return found


def kill_descendants() -> None:
    """Kill and reap every process below this one. Each killed process's children are
    re-parented here (the subreaper), so the next round finds them, until none is left."""
    while True:
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def reap(spec: dict[str, object], command: list[str]) -> int:
    """Run ``command`` as the spec's user in a child, kill everything left below this
    process when it ends, and end the way it did (its exit code or its signal)."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Before the fork: the reaper re-raises the child's signal, and must not dump a core.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # A SIGTERM before its handler is in place would end the reaper alone: held off till then.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    pid = os.fork()
    if pid == 0:
        try:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
            limit(spec)
            if spec.get("uid") is not None:
                os.setgroups([])
                os.setresgid(spec["gid"], spec["gid"], spec["gid"])
                os.setresuid(spec["uid"], spec["uid"], spec["uid"])
            _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            with contextlib.suppress(OSError, KeyError):
                os.chdir(spec["cwd"])
            os.execvp(command[0], command)
        except BaseException as exc:  # whatever failed, the fork must not run on as the reaper
            os.write(2, f"jail: cannot start {command[0]}: {exc}\n".encode())
        os._exit(127)
    # The reaper writes nothing: it must not hold the child's result channel open.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)

    def end_child(*_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    # The supervisor's kill: the child and all it started die, and the reaper says so.
    signal.signal(signal.SIGTERM, end_child)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _, status = os.waitpid(pid, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kill_descendants()
    if os.WIFSIGNALED(status):
        ended = os.WTERMSIG(status)
        if ended != signal.SIGKILL:  # the one signal no handler can be set for
            signal.signal(ended, signal.SIG_DFL)
        os.kill(os.getpid(), ended)
        return 128 + ended
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    """Set up the mounts the spec asks for, then run the command as the sandbox user under
    this reaper."""
    spec = json.loads(argv[0])
    command = argv[argv.index("--") + 1 :]
    if spec.get("mounts"):
        wanted = sorted((p for p in spec["expose"] if os.path.isdir(p)), key=len)
        held = [os.open(p, os.O_PATH) for p in wanted]
        hide(spec["hide"])
        for path, fd in zip(wanted, held, strict=True):
            expose(Path(path), fd, spec["uid"], spec["gid"])
            os.close(fd)
    if spec.get("network"):
        loopback_up()
    return reap(spec, command)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
