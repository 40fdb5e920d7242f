"""A hostile suite: each kernel computes a wrong answer, then tries to pass anyway by
writing a well-formed ``pass`` result through one channel it can reach, and stops its
process quietly so that only the forgery would speak for it. ``spy`` instead reports what it
could see and reach (environment, user, network, files) in its error text.

The files, port and secrets it aims at are in ``targets.json`` beside this file's copy,
written by the test (tests/test_security_child.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import socket
import sys
from pathlib import Path

import torch

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite

_TARGETS = json.loads((Path(__file__).parent / "targets.json").read_text())


def _wrong(t, o, p, cfg):
    o["y"].copy_(3.0 * t["x"])
    return LaunchConfig({}, num_warps=1, num_stages=1)


def _right(t, o, p, cfg):
    o["y"].copy_(2.0 * t["x"])
    return LaunchConfig({}, num_warps=1, num_stages=1)


def _runner_frame():
    frame = sys._getframe()
    while frame is not None and not (frame.f_code.co_name == "main" and "index" in frame.f_locals):
        frame = frame.f_back
    return frame


def _forged_line(name: str) -> tuple[dict, bytes]:
    """A genuine-looking pass for this case: the harness's own check of an honest twin."""
    from kernelwatch.harness.correctness import check_case
    from kernelwatch.harness.device import select_device, software_info

    frame = _runner_frame()
    task = frame.f_locals["task"]
    honest = dataclasses.replace(SUITE.kernel(name), launch=_right)
    record = check_case(
        honest, SUITE.name, task.workload, task.params, task.dtype, select_device(), 0,
        software_info(),
    )  # fmt: skip
    event = {"event": "result", "task": frame.f_locals["index"], "record": record.to_json()}
    return event, (json.dumps(event) + "\n").encode()


def _via_stdout(t, o, p, cfg):
    _, line = _forged_line("stdout")
    sys.stdout.write(line.decode())
    sys.stdout.flush()
    os._exit(0)


def _via_stderr(t, o, p, cfg):
    _, line = _forged_line("stderr")
    os.write(2, line)
    os._exit(0)


def _via_own_fds(t, o, p, cfg):
    _, line = _forged_line("own_fds")
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            os.write(int(fd), line)
        try:
            with open(f"/proc/self/fd/{fd}", "wb") as handle:
                handle.write(line)
        except OSError:
            pass
    os._exit(0)


def _via_parent_fds(t, o, p, cfg):
    _, line = _forged_line("parent_fds")
    parent = os.getppid()
    try:
        fds = os.listdir(f"/proc/{parent}/fd")
    except OSError:
        fds = []
    for fd in fds:
        try:
            with open(f"/proc/{parent}/fd/{fd}", "wb") as handle:
                handle.write(line)
        except OSError:
            pass
    os._exit(0)


def _via_runner(t, o, p, cfg):
    """Call the runner's own signed writer, found in its frame or in memory."""
    event, _ = _forged_line("runner")
    emit = _runner_frame().f_locals.get("emit")
    if emit is None:
        emit = next(o.send for o in gc.get_objects() if type(o).__name__ == "Writer")
    emit(event)
    os._exit(0)


def _via_files(t, o, p, cfg):
    _, line = _forged_line("files")
    for target in _TARGETS["files"]:
        with contextlib.suppress(OSError):
            Path(target).write_bytes(line)
    os._exit(0)


def _spy(t, o, p, cfg):
    seen = {"uid": os.getuid(), "env": dict(os.environ), "home": os.environ.get("HOME")}
    try:
        socket.create_connection(("127.0.0.1", _TARGETS["port"]), timeout=2).close()
        seen["network"] = "connected"
    except OSError as exc:
        seen["network"] = f"refused: {exc}"
    seen["secret"] = {}
    for path in _TARGETS["secrets"]:
        try:
            seen["secret"][path] = Path(path).read_text()
        except OSError as exc:
            seen["secret"][path] = f"unreadable: {type(exc).__name__}"
    raise RuntimeError("SPY " + json.dumps(seen))


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
    name="hostile",
    kernels=(
        _spec("honest", _right),
        # Before the forgers: what it sees must not depend on how they fare.
        _spec("spy", _spy),
        _spec("stdout", _via_stdout),
        _spec("stderr", _via_stderr),
        _spec("own_fds", _via_own_fds),
        _spec("parent_fds", _via_parent_fds),
        _spec("runner", _via_runner),
        _spec("files", _via_files),
        _spec("wrong", _wrong),
    ),
)
