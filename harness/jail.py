"""The first step of a sandboxed child when the worker is root:
``unshare --mount --net -- python -m kernelwatch.harness.jail SPEC -- ARGV...``.

Still root, in its own mount namespace, it hides what the sandbox user must not see and
makes reachable what it must (the Python installation under root's private home, a
checkout under a private directory): a tmpfs over each directory that blocks the way, and
the needed directories bound back at their own paths. It then drops to the sandbox user for
good (no groups, no new privileges) and executes ``ARGV``. Nothing here imports kernel code.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import socket
import struct
import sys
from pathlib import Path

_MS_BIND, _MS_REC, _MS_NOSUID, _MS_NODEV = 4096, 16384, 2, 4
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_PR_SET_NO_NEW_PRIVS = 38
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


def main(argv: list[str]) -> int:
    """Set up the mounts the spec asks for, become the sandbox user and exec the command."""
    spec = json.loads(argv[0])
    command = argv[argv.index("--") + 1 :]
    if spec["mounts"]:
        wanted = sorted((p for p in spec["expose"] if os.path.isdir(p)), key=len)
        held = [os.open(p, os.O_PATH) for p in wanted]
        hide(spec["hide"])
        for path, fd in zip(wanted, held, strict=True):
            expose(Path(path), fd, spec["uid"], spec["gid"])
            os.close(fd)
    if spec.get("network"):
        loopback_up()
    os.setgroups([])
    os.setresgid(spec["gid"], spec["gid"], spec["gid"])
    os.setresuid(spec["uid"], spec["uid"], spec["uid"])
    _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    with contextlib.suppress(OSError):
        os.chdir(spec["cwd"])
    os.execv(command[0], command)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
