"""A hostile suite whose kernels try to outlast their child or to exhaust the host (issue 29,
item 3): one leaves a ``sleep`` of 300 s behind that double-forked and called ``setsid``, so it is
in no process group the supervisor kills, one writes 2 GiB to a file, one prints 100 MB on
stderr. ``honest`` comes last: the run must go on to it.

Checked by tests/test_security_descendants.py.
"""

from __future__ import annotations

import os
import sys
import time

import torch

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite

_CHUNK = b"\0" * (1 << 20)


def _right(t, o, p, cfg):
    o["y"].copy_(2.0 * t["x"])
    return LaunchConfig({}, num_warps=1, num_stages=1)


def _orphan(t, o, p, cfg):
    """Leave a ``sleep`` that is nobody's child and leads its own session, and name it in the
    error text by its argument, unique to this run: the test finds it on the host by its
    command line, since in the sandbox's PID namespace its pid means nothing outside."""
    seconds = f"300.{int.from_bytes(os.urandom(4), 'big'):010d}"
    read, write = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(write, str(os.getpid()).encode())
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.execvp("sleep", ["sleep", seconds])
        os._exit(0)
    os.close(write)
    pid = os.read(read, 32).decode()
    os.wait()
    # Return only once the grandchild runs ``sleep``: before its exec it is still Python.
    cmdline = f"/proc/{pid}/cmdline"
    for _ in range(500):
        with open(cmdline, "rb") as handle:
            if handle.read().startswith(b"sleep\0"):
                break
        time.sleep(0.01)
    raise RuntimeError(f"ORPHAN sleep {seconds}")


def _big_file(t, o, p, cfg):
    """Write 2 GiB into the private temporary directory, then answer right."""
    with open(os.path.join(os.environ["TMPDIR"], "big"), "wb") as handle:
        for _ in range(2048):
            handle.write(_CHUNK)
    return _right(t, o, p, cfg)


def _shout(t, o, p, cfg):
    """Print 100 MB on stderr, then die without a word on the result channel."""
    line = b"x" * 1023 + b"\n"
    for _ in range(100_000):
        os.write(2, line)
    sys.stderr.flush()
    os._exit(1)


def _spec(name: str, launch) -> KernelSpec:
    return KernelSpec(
        name=name,
        summary=f"hostile kernel: {name}",
        make_inputs=lambda p, dtype, dev, gen: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": 2.0 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
        workloads={"smoke": ({"n": 16},)},
        flops=lambda p: int(p["n"]),
        min_bytes=lambda p, e: 2 * e * int(p["n"]),
        dtypes=("fp32",),
    )


SUITE = Suite(
    name="escape",
    kernels=(
        _spec("orphan", _orphan),
        _spec("big_file", _big_file),
        _spec("shout", _shout),
        _spec("honest", _right),
    ),
)
