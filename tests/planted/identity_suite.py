"""A two-kernel suite whose copies a test edits one way each (a comment inside a kernel, a
launch grid, a helper ``@triton.jit`` function, a workload's shapes, how inputs are made, a
library call in a launch) to see which edits change a case's build identity."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite

BLOCK = 32
#: Programs launched past the last block: they are masked off, so the code is the same.
GRID_EXTRA = 0
SCALE_CASES = ({"n": 70},)


@triton.jit
def _twice(x):
    return x * 2.0


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, _twice(x), mask=mask)


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)


def _inputs(p, dtype, device, gen):
    return {"x": torch.randn(int(p["n"]), generator=gen, device=device).to(dtype)}


def _launch_scale(t, o, p, cfg):
    n = t["x"].numel()
    scale_kernel[(triton.cdiv(n, BLOCK) + GRID_EXTRA,)](t["x"], o["y"], n, BLOCK=BLOCK)
    return LaunchConfig({"BLOCK": BLOCK}, num_warps=4, num_stages=1)


def _launch_copy(t, o, p, cfg):
    n = t["x"].numel()
    # Twice over: two launches of one kernel are two parts of the case's identity.
    for _ in range(2):
        copy_kernel[(triton.cdiv(n, BLOCK),)](t["x"], o["y"], n, BLOCK=BLOCK)
    return LaunchConfig({"BLOCK": BLOCK}, num_warps=4, num_stages=1)


def _spec(name, launch, cases, scale):
    return KernelSpec(
        name=name,
        summary=f"identity test kernel: {name}",
        family="planted",
        make_inputs=_inputs,
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": scale * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": scale * t["x"]}),
        workloads={"smoke": cases},
        flops=lambda p: int(p["n"]),
        min_bytes=lambda p, e: 2 * e * int(p["n"]),
        # fp16 is built, fp32 only recorded (identified by its builds' cache keys)
        dtypes=("fp16", "fp32"),
    )


SUITE = Suite(
    name="identity",
    kernels=(
        _spec("scale", _launch_scale, SCALE_CASES, 2.0),
        _spec("copy", _launch_copy, ({"n": 40},), 1.0),
    ),
)
