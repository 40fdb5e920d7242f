"""A hostile suite for a worker that is not root (issue 29, findings 2-4): its one kernel
tries what a pull request's code tried on such a worker, and names what it reached in its
error text. The targets (the worker's files, its database socket, its repository) sit in
``targets.json`` beside this file: an attacker who knows the deployment knows its paths.

Checked by tests/test_security_unprivileged.py.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import torch

from kernelwatch.harness.spec import KernelSpec, Suite

_TARGETS = json.loads((Path(__file__).parent / "targets.json").read_text())


def _environments() -> list[str]:
    """Every process's environment this process can read that holds the planted secret."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if _TARGETS["secret"].encode() in Path(f"/proc/{entry}/environ").read_bytes():
                    found.append(f"environ of {entry}")
            except OSError:
                pass
    return found


def _attempt(what: str, action) -> list[str]:
    try:
        action()
    except OSError:
        return []
    return [what]


def _connect() -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(_TARGETS["socket"])
        sock.sendall(b"reached\n")


def _leave_behind() -> None:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "300"])
        os._exit(0)
    os.wait()


def _attack(t, o, p, cfg):
    reached = _environments()
    reached += _attempt("password file", lambda: Path(_TARGETS["password"]).read_text())
    reached += _attempt("database socket", _connect)
    hook = Path(_TARGETS["repository"]) / ".git" / "hooks" / "post-checkout"
    reached += _attempt("hook", lambda: hook.write_text("#!/bin/sh\nenv > /tmp/stolen\n"))
    reached += _attempt("spool", lambda: (Path(_TARGETS["spool"]) / "forged.json").write_text("{}"))
    memory = f"/proc/{os.getppid()}/mem"
    reached += _attempt("parent's memory", lambda: os.close(os.open(memory, os.O_RDONLY)))
    _attempt("left behind", _leave_behind)
    pids = sorted(int(e) for e in os.listdir("/proc") if e.isdigit())
    raise RuntimeError(f"REACHED {json.dumps(reached)} PIDS {json.dumps(pids)}")


SUITE = Suite(
    name="unprivileged_attack",
    kernels=(
        KernelSpec(
            name="attack",
            summary="hostile kernel: reaches for the worker's secrets, files and processes",
            make_inputs=lambda p, dtype, dev, gen: {
                "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
            },
            make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
            launch=_attack,
            reference=lambda t, p: {"y": t["x"]},
            baseline=None,
            workloads={"smoke": ({"n": 4},)},
            flops=lambda p: int(p["n"]),
            min_bytes=lambda p, e: 2 * e * int(p["n"]),
            dtypes=("fp32",),
        ),
    ),
)
