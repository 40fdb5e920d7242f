"""What a sandboxed child is, as it sees itself: run as ``python -m preload_probe`` in a
sandbox, by ``exec`` or forked by a preload server (tests/test_preload.py), it prints one
JSON line of facts on stderr. The two ways must give the same facts."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import sys
from pathlib import Path

_PR_GET_DUMPABLE = 3
NAMESPACES = ("net", "mnt", "pid", "user")


def _fd_kinds() -> dict[str, str]:
    kinds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the listing's own descriptor, closed meanwhile
        kinds[fd] = target.split(":")[0] if ":" in target else "file"
    return kinds


def _readable_foreign_fds() -> list[int]:
    """Processes other than this one whose open files this one can list."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                os.listdir(f"/proc/{entry}/fd")
            except OSError:
                continue
            found.append(int(entry))
    return found


def facts() -> dict[str, object]:
    lines = Path("/proc/self/status").read_text().splitlines()
    status = dict(line.split(":", 1) for line in lines)
    return {
        "uid": os.getresuid(),
        "gid": os.getresgid(),
        "groups": os.getgroups(),
        "pid": os.getpid(),
        "caps": {k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd")},
        "no_new_privs": status["NoNewPrivs"].strip(),
        "limits": {
            name: resource.getrlimit(getattr(resource, name))
            for name in ("RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NOFILE")
        },
        "dumpable": ctypes.CDLL(None).prctl(_PR_GET_DUMPABLE, 0, 0, 0, 0),
        "namespaces": {
            ns: os.readlink(f"/proc/self/ns/{ns}") for ns in ("net", "mnt", "pid", "user")
        },
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "fds": _fd_kinds(),
        "visible_processes": sum(entry.isdigit() for entry in os.listdir("/proc")),
        "foreign_fds": _readable_foreign_fds(),
        "argv0": os.path.basename(sys.argv[0]),
        "path0": sys.path[0],
        "umask": os.umask(0o022),
        "session_leader": os.getsid(0) == os.getpid(),
        "stdin": sys.stdin.read(),
    }


if __name__ == "__main__":
    print("PROBE " + json.dumps(facts()), file=sys.stderr)
