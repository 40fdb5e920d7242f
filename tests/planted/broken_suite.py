"""A suite of deliberately broken kernels: each plants one failure the harness must catch.

All share one real Triton kernel (y = a * x over a masked 1-D range) and break it in one way.
"""

from __future__ import annotations

import ctypes
import itertools
import time

import torch
import triton
import triton.language as tl

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite


@triton.jit
def scale_kernel(
    x_ptr, y_ptr, n, a, SKIP_TAIL: tl.constexpr, NAN_AT: tl.constexpr, BLOCK: tl.constexpr
):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    limit = n - SKIP_TAIL
    x = tl.load(x_ptr + offs, mask=offs < limit, other=0.0).to(tl.float32)
    y = a * x
    if NAN_AT >= 0:
        y = tl.where(offs == NAN_AT, float("nan"), y)
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=offs < limit)


def launch_scale(
    x: torch.Tensor, y: torch.Tensor, a: float, skip_tail: int = 0, nan_at: int = -1
) -> LaunchConfig:
    block = 32
    scale_kernel[(triton.cdiv(x.numel(), block),)](
        x, y, x.numel(), a, SKIP_TAIL=skip_tail, NAN_AT=nan_at, BLOCK=block
    )
    return LaunchConfig({"BLOCK": block}, num_warps=4, num_stages=1)


_calls = itertools.count()


def _flaky(t, o, p, cfg):  # a different rounding every other launch, like racing atomics
    a = 2.0 + (1e-3 if next(_calls) % 2 else 0.0)
    return launch_scale(t["x"], o["y"], a)


def _segfault(t, o, p, cfg):
    ctypes.string_at(0)


def _hang(t, o, p, cfg):
    time.sleep(3600)


def _raises(t, o, p, cfg):
    raise RuntimeError("planted: the kernel raised")


def _spec(name: str, launch, reference_scale: float = 2.0) -> KernelSpec:
    return KernelSpec(
        name=name,
        summary=f"planted kernel: {name}",
        family="planted",
        make_inputs=lambda p, dtype, dev, gen: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": reference_scale * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
        workloads={"smoke": ({"n": 70},)},
        flops=lambda p: int(p["n"]),
        min_bytes=lambda p, e: 2 * e * int(p["n"]),
        dtypes=("fp32", "fp16"),
    )


SUITE = Suite(
    name="planted",
    kernels=(
        _spec("good", lambda t, o, p, cfg: launch_scale(t["x"], o["y"], 2.0)),
        _spec("wrong_result", lambda t, o, p, cfg: launch_scale(t["x"], o["y"], 2.01)),
        _spec("unwritten_tail", lambda t, o, p, cfg: launch_scale(t["x"], o["y"], 2.0, 3)),
        _spec("nan_output", lambda t, o, p, cfg: launch_scale(t["x"], o["y"], 2.0, 0, 5)),
        _spec("nondeterministic", _flaky),
        _spec("raises", _raises),
        _spec("segfault", _segfault),
        _spec("hangs", _hang),
    ),
)
