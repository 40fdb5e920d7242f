"""The first step of every sandboxed child: ``[unshare ... --] python -m
kernelwatch.harness.isolation.jail SPEC -- ARGV...``.

As root, in its own mount namespace, it hides what the sandbox user must not see and makes
reachable what it must (the Python installation under root's private home, a checkout under
a private directory): a tmpfs over each directory that blocks the way, and the needed
directories bound back at their own paths.

A worker that is not root has no other user to drop to: its children would share its uid, so
every file it can write and every process it runs. With ``confine`` (in the user, mount,
PID and network namespaces ``sandbox.py`` makes), the jail builds the child a view of its
own instead: everything read-only, every top-level directory but the system's (``KEPT``)
covered by an empty tmpfs, so the worker's home, ``/tmp``, ``/run``, the embedded
PostgreSQL's socket and data, the spool, the repositories and other runs' directories are
gone; the Python installation and the suites bound back read-only, the sandbox's own
directory read-write. The child then enters a user namespace of its own, where those mounts
are locked (it cannot unmount them to see below) and it holds no capability; the PID
namespace hides every process outside it, the worker's included, and ends all of them when
the reaper ends.

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
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: What runs in place of ``exec``: the child's module in a preloaded process; never returns.
Run = Callable[[], None]

_MS_BIND, _MS_REC, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_PRIVATE = 4096, 16384, 2, 4, 8, 1 << 18
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_NO_NEW_PRIVS, _PR_SET_CHILD_SUBREAPER, _PR_SET_DUMPABLE = 38, 36, 4
_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_CLONE_NEWNET = 0x40000000
#: ``unshare``'s options ``sandbox.network_namespace_prefix`` uses, as ``unshare(2)`` flags.
_UNSHARE_OPTIONS = {"--user": _CLONE_NEWUSER, "--mount": _CLONE_NEWNS, "--net": _CLONE_NEWNET}
_SYS_MOUNT_SETATTR, _AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = 442, -100, 0x8000, 0x1
#: The top-level directories a confined child keeps (read-only): the system's programs,
#: libraries, settings, devices and kernel interfaces. Everything else is covered.
KEPT = frozenset({"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "dev",
                  "proc", "sys"})  # fmt: skip
#: Mounts a confined child may write: its own /proc (the jail writes its user namespace's
#: maps there) and the shared-memory tmpfs the collectives' ranks meet in.
WRITABLE_SYSTEM = ("/proc", "/dev/shm")
#: The size of each empty tmpfs over a covered directory: room for the directories the
#: binds need, not for filling the host's memory.
COVER_SIZE = "16m"
#: The largest file kernel code may write: a kernel has no reason to write more, and a
#: hostile one must not fill the host's disk.
FILE_LIMIT = 1 << 30
#: The processes (threads count) the sandbox user may have, all its children together: room
#: for several children with a thread per core each, not for a fork bomb. A quarter of the
#: runner container's own limit (infra/compose.yaml ``pids_limit``), so that one job that
#: forks until refused leaves the concurrent jobs room to fork.
PROCESS_LIMIT = 4096
#: How long the reaper hunts what the child left once it ended: below the supervisor's
#: grace (``child.REAP_GRACE_S``), so the reaper ends by itself and says how the child
#: ended. What it could not catch in that time (possible only without a PID namespace) the
#: end of the uid's lease ends (:func:`end_user`).
REAPER_WITHIN_S = 5.0
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


def _set_mount_attr(path: str, set_: int = 0, clear: int = 0) -> None:
    """``mount_setattr(2)`` on ``path`` and every mount below it."""
    attr = ctypes.create_string_buffer(struct.pack("QQQQ", set_, clear, 0, 0))
    flags = _AT_RECURSIVE
    if _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), flags, attr, 32) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount_setattr {path}: {os.strerror(errno)}")


def confine(spec: dict[str, object]) -> None:
    """The view of a confined child (a worker that is not root): every mount read-only,
    every top-level directory outside ``KEPT`` covered by an empty tmpfs, the files of
    ``hide`` covered, the directories of ``expose`` bound back read-only and those of
    ``writable`` read-write. Runs as the root of a fresh user namespace that owns the
    mount namespace."""
    writable = [p for p in spec["writable"] if os.path.isdir(p)]  # type: ignore[attr-defined]
    exposed = sorted(p for p in spec["expose"] if os.path.isdir(p))  # type: ignore[attr-defined]
    # A directory inside another comes with it (the binds are recursive).
    expose = [p for p in exposed if not any(Path(p).is_relative_to(o) for o in exposed if o != p)]
    held = {p: os.open(p, os.O_PATH) for p in {*expose, *writable}}
    _set_mount_attr("/", set_=_MOUNT_ATTR_RDONLY)
    for path in WRITABLE_SYSTEM:
        if os.path.ismount(path):
            _set_mount_attr(path, clear=_MOUNT_ATTR_RDONLY)
    for name in sorted(os.listdir("/")):
        top = f"/{name}"
        if name not in KEPT and os.path.isdir(top) and not os.path.islink(top):
            _mount("tmpfs", top, "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=0755,size={COVER_SIZE}")
    hide(spec["hide"])  # type: ignore[arg-type]
    for path in [*sorted(expose, key=len), *writable]:
        _bind_back(Path(path), held[path], read_only=path not in writable)
    for fd in held.values():
        os.close(fd)


def _bind_back(target: Path, fd: int, read_only: bool) -> None:
    """The directory open as ``fd`` bound at ``target`` (its own path) in the confined view,
    read-only or not, whatever covers it now."""
    for ancestor in [*reversed(target.parents)][1:]:
        if not ancestor.exists():
            ancestor.mkdir()  # inside a tmpfs mounted above
    if not target.exists():
        target.mkdir()
    _mount(f"/proc/self/fd/{fd}", str(target), None, _MS_BIND | _MS_REC, None)
    if read_only:
        _set_mount_attr(str(target), set_=_MOUNT_ATTR_RDONLY)
    else:
        _set_mount_attr(str(target), clear=_MOUNT_ATTR_RDONLY)


def enter_own_user_namespace(uid: int, gid: int) -> None:
    """Move this process into a user namespace (and mount namespace) of its own, as ``uid``
    and ``gid``: the mounts made by the namespace above become locked, so the child cannot
    unmount a cover, and after ``exec`` it holds no capability there."""
    if _libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare: {os.strerror(errno)}")
    for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} 0 1"), ("gid_map", f"{gid} 0 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(line)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


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
    shares; the spec's ``nproc`` may set a lower count. Address space is not limited: CUDA
    reserves far more virtual memory than it uses, and an RLIMIT_AS would break every GPU
    run."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
    if spec.get("uid") is not None:
        processes = int(spec.get("nproc", PROCESS_LIMIT))  # type: ignore[call-overload]
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))


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


def kill_descendants(within_s: float) -> None:
    """Kill and reap every process below this one, for at most ``within_s``. Each killed
    process's children are re-parented here (the subreaper), so the next round finds them;
    every round reaps all that have ended, so a fork bomb's thousands of zombies cost one
    round, not one each. A "comet" that forks and exits in a loop may stay one step ahead
    of ``/proc``: past ``within_s`` the reaper gives up, and the end of the sandbox's uid
    lease ends it (:func:`end_user`; ``sandbox.leased_identity``)."""
    deadline = time.monotonic() + within_s
    while True:
        for pid in children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0] != 0:
                pass
        except ChildProcessError:
            return
        if time.monotonic() > deadline:
            return
        time.sleep(0.001)  # the killed die between rounds


def live_processes(uid: int, but: int | None = None) -> list[int]:
    """The processes of ``uid`` (by real uid) that are not zombies, ``but`` left out."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == but:
            continue
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(entry))
    return found


def end_user(uid: int, within_s: float) -> int:
    """Kill every process of ``uid`` (a leased sandbox uid, whose gid is the same), as ``uid``
    itself: ``kill(-1, SIGKILL)`` signals all of them in one pass of the kernel's process
    list, during which none can fork (a fork that completes after it fails on its parent's
    pending SIGKILL), so a process that forks and exits in a loop cannot stay ahead of it as
    it can of a scan of ``/proc``. Repeated until no live process of ``uid`` is left; 0
    then, 1 if some still live after ``within_s`` (a process stuck in the kernel)."""
    if uid == 0:
        raise SystemExit("jail --end 0: root's processes are not a sandbox's")
    if os.getuid() == 0:  # started by a root worker: become the uid (its gid is the same)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    deadline = time.monotonic() + within_s
    while True:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            return 0  # nothing of this uid left to signal, not even a zombie
        if not live_processes(uid, but=os.getpid()):
            return 0
        if time.monotonic() > deadline:
            return 1
        time.sleep(0.005)


def _start(spec: dict[str, object], command: list[str], run: Run | None = None) -> None:
    """In a fresh fork: become the child (limits, its user namespace or the sandbox user, no
    new privileges) and ``exec`` ``command``, or call ``run`` instead (a process that
    imported the child's libraries already, ``preload.py``); never returns."""
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        limit(spec)
        if spec.get("confine"):
            uid, gid = spec["user"]  # type: ignore[misc]
            # Dumpable, as the child is once it runs: a process that was not exec'd in this
            # user namespace (a preload server's fork) owns its /proc files only then, and
            # could not write its new namespace's maps.
            set_dumpable(True)
            enter_own_user_namespace(uid, gid)
        if spec.get("uid") is not None:
            os.setgroups([])
            os.setresgid(spec["gid"], spec["gid"], spec["gid"])
            os.setresuid(spec["uid"], spec["uid"], spec["uid"])
        _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        with contextlib.suppress(OSError, KeyError):
            os.chdir(spec["cwd"])
        if run is not None:
            run()
        os.execvp(command[0], command)
    except BaseException as exc:  # whatever failed, the fork must not run on as the reaper
        os.write(2, f"jail: cannot start {command[0]}: {exc}\n".encode())
    os._exit(127)


def _quiet() -> None:
    """Point stdin and stdout at /dev/null: a process that outlives the child's output must
    not hold its result channel open."""
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)


def _init(spec: dict[str, object], command: list[str], report: int, run: Run | None) -> None:
    """PID 1 of the child's PID namespace: a ``/proc`` of that namespace (in a mount
    namespace of its own, so the reaper keeps the host's), then ``command`` as PID 2, every
    orphan reaped until it ends, and its wait status written to ``report``. When this process
    exits the kernel kills whatever is left in the namespace."""
    try:
        if _libc.unshare(_CLONE_NEWNS) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNS)")
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
        child = os.fork()
        if child == 0:
            os.close(report)
            _start(spec, command, run)
        _quiet()
        while True:
            pid, status = os.waitpid(-1, 0)
            if pid == child:
                os.write(report, struct.pack("i", status))
                break
    except BaseException as exc:
        os.write(2, f"jail: cannot start {command[0]}: {exc}\n".encode())
        os._exit(127)
    os._exit(0)


def reap(spec: dict[str, object], command: list[str], run: Run | None = None) -> int:
    """Run ``command`` as the spec's user in a child, kill everything left below this
    process when it ends, and end the way it did (its exit code or its signal).

    With ``pids``, the child runs in a PID namespace of its own, below an init of that
    namespace (:func:`_init`): it sees no other process, and its end (or its kill) ends every
    process it left. The reaper itself stays outside, so it can still end the way the child
    did: the PID 1 of a namespace cannot be ended by a signal it sends itself."""
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    # Before the fork: the reaper re-raises the child's signal, and must not dump a core.
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # A SIGTERM before its handler is in place would end the reaper alone: held off till then.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    own_pids = bool(spec.get("pids"))
    if own_pids:
        if _libc.unshare(_CLONE_NEWPID) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"unshare(CLONE_NEWPID): {os.strerror(errno)}")
        report, told = os.pipe()
    pid = os.fork()
    if pid == 0:
        if own_pids:
            os.close(report)
            _init(spec, command, told, run)
        _start(spec, command, run)
    if own_pids:
        os.close(told)
    _quiet()

    def end_child(*_: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)

    # The supervisor's kill: the child and all it started die, and the reaper says so.
    signal.signal(signal.SIGTERM, end_child)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    _, status = os.waitpid(pid, 0)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if own_pids:
        told_status = os.read(report, 4)
        if len(told_status) == 4 and os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            status = struct.unpack("i", told_status)[0]
    kill_descendants(REAPER_WITHIN_S)
    if os.WIFSIGNALED(status):
        ended = os.WTERMSIG(status)
        if ended != signal.SIGKILL:  # the one signal no handler can be set for
            signal.signal(ended, signal.SIG_DFL)
        os.kill(os.getpid(), ended)
        return 128 + ended
    return os.WEXITSTATUS(status)


def set_dumpable(dumpable: bool) -> None:
    """Make this process dumpable or not. Kernel code shares the reaper's uid when the worker
    is not root (and the uid of ``--end``'s): undumpable, it cannot read or stop it through
    ptrace or /proc."""
    _libc.prctl(_PR_SET_DUMPABLE, int(dumpable), 0, 0, 0)


def main(argv: list[str], run: Run | None = None) -> int:
    """Set up the mounts the spec asks for, then run the command as the sandbox user under
    this reaper (``run`` instead of ``exec``, as :func:`_start` says); or, with ``--end UID
    SECONDS``, run as that uid, end all its processes (:func:`end_user`)."""
    set_dumpable(False)
    if argv[0] == "--end":
        return end_user(int(argv[1]), float(argv[2]))
    spec = json.loads(argv[0])
    command = argv[argv.index("--") + 1 :]
    if spec.get("confine"):
        confine(spec)
    elif spec.get("mounts"):
        wanted = sorted((p for p in spec["expose"] if os.path.isdir(p)), key=len)
        held = [os.open(p, os.O_PATH) for p in wanted]
        hide(spec["hide"])
        for path, fd in zip(wanted, held, strict=True):
            expose(Path(path), fd, spec["uid"], spec["gid"])
            os.close(fd)
    if spec.get("network"):
        loopback_up()
    return reap(spec, command, run)


def unshare(options: Sequence[str]) -> None:
    """Do in this process what ``unshare OPTIONS`` does before it runs its command (the
    options ``sandbox.network_namespace_prefix`` gives, program name first): the namespaces,
    with ``--map-root-user`` this user as root of the new user namespace, and every mount of a
    new mount namespace private, as ``unshare``'s default ``--propagation private`` makes
    them, so that nothing mounted here reaches the host's namespace."""
    flags = 0
    for option in options[1:]:
        if option != "--map-root-user":
            flags |= _UNSHARE_OPTIONS[option]
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"unshare {' '.join(options[1:])}: {os.strerror(errno)}")
    if "--map-root-user" in options:
        maps = (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1"))
        for name, line in maps:
            with open(f"/proc/self/{name}", "w") as handle:
                handle.write(line)
    if flags & _CLONE_NEWNS:
        _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
