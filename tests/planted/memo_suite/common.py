"""What both kernels share: how inputs are made, and their spec's shape."""

from __future__ import annotations

import torch
import triton

from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig

BLOCK = 32


def inputs(p, dtype, device, gen):
    return {"x": torch.randn(int(p["n"]), generator=gen, device=device).to(dtype)}


def spec(name: str, kernel, factor: float) -> KernelSpec:
    """An elementwise ``y = factor * x`` kernel's spec; its launch runs ``kernel``."""

    def launch(t, o, p, cfg):
        n = t["x"].numel()
        kernel[(triton.cdiv(n, BLOCK),)](t["x"], o["y"], n, BLOCK=BLOCK)
        return LaunchConfig({"BLOCK": BLOCK}, num_warps=4, num_stages=1)

    return KernelSpec(
        name=name,
        summary=f"memo test kernel: {name}",
        family="planted",
        make_inputs=inputs,
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": factor * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": factor * t["x"]}),
        workloads={"smoke": ({"n": 70},)},
        flops=lambda p: int(p["n"]),
        min_bytes=lambda p, e: 2 * e * int(p["n"]),
        dtypes=("fp16",),
    )
