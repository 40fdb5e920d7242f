"""Measure the device's real roofs: copy bandwidth and a large bf16 GEMM.

Datasheet peaks are rarely reachable (an H200 copies at ~4.3 of its 4.8 TB/s); measured
ceilings make %SOL say how far a kernel is from what this device actually does. Both are
timed with the run's own timer and stopping rule. The GEMM multiplies random data: on zeros
the tensor cores draw less power and run ~13% faster. Each ceiling is measured on its own: one
that fails (out of memory, every sample throttled, a CUDA error) is left out with its reason,
and the run goes on with the datasheet's roof in its place.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kernelwatch.harness.device import Device
from kernelwatch.harness.timing.roofline import Ceilings
from kernelwatch.harness.timing.sampling import Collected, summarize_collected

#: (bytes copied, GEMM size) per device kind: big enough to saturate an H200 (2 x 1 GiB
#: moved per copy, an 8192^3 GEMM), small enough for a CPU to finish in a second or two.
_SIZES = {"cuda": (1 << 30, 8192), "cpu": (16 << 20, 256)}


@dataclass(frozen=True)
class CeilingLaunches:
    """The two workloads: ``copy()`` moves ``copy_bytes`` each way, ``gemm()`` multiplies
    two random bf16 matrices of ``gemm_size`` squared. Each is made when first asked for,
    so a copy buffer that does not fit cannot stop the GEMM."""

    copy: Callable[[], Callable[[], object]]
    copy_bytes: int
    gemm: Callable[[], Callable[[], object]]
    gemm_size: int


def device_launches(device: Device) -> CeilingLaunches:
    """The ceiling workloads on ``device``, at its kind's sizes."""
    copy_bytes, n = _SIZES["cuda" if device.info.kind == "cuda" else "cpu"]
    where = torch.device(device.torch_device)

    def generator() -> torch.Generator:
        return torch.Generator(device=where).manual_seed(0)

    def copy() -> Callable[[], object]:
        src = torch.randn(copy_bytes // 4, generator=generator(), device=where)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)

    def gemm() -> Callable[[], object]:
        g = generator()
        a, b = (torch.randn(n, n, generator=g, device=where, dtype=torch.bfloat16) for _ in "ab")
        c = torch.empty(n, n, device=where, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=c)

    return CeilingLaunches(copy, copy_bytes, gemm, n)


def measure_ceilings(
    device: Device,
    sample: Callable[[Callable[[], object]], Collected],
    launches: CeilingLaunches | None = None,
) -> Ceilings:
    """Copy bandwidth (read plus write bytes over time) and bf16 GEMM TFLOP/s, each the
    median of the unthrottled samples ``sample(launch)`` takes with the run's timer and
    stopping rule; a ceiling that fails is None, with its reason in ``Ceilings.problems``.
    Never raises."""
    work = launches or device_launches(device)
    problems: list[str] = []

    def median_ns(name: str, make: Callable[[], Callable[[], object]]) -> float | None:
        try:
            collected = sample(make())
        except Exception as exc:  # a failed ceiling is "not measured", not a failed run
            line = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            problems.append(f"{name}: {line[:300]}")
            return None
        summary = summarize_collected(collected)
        if summary is None:
            problems.append(f"{name}: every sample was taken while the GPU throttled")
            return None
        return summary.median_ns

    copy_ns = median_ns("copy", work.copy)
    gemm_ns = median_ns("bf16 GEMM", work.gemm)
    n = work.gemm_size
    return Ceilings(
        copy_gbps=None if copy_ns is None else 2 * work.copy_bytes / copy_ns,  # B/ns is GB/s
        bf16_tflops=None if gemm_ns is None else 2 * n**3 / gemm_ns / 1e3,  # FLOP/ns is GFLOP/s
        copy_bytes=work.copy_bytes,
        gemm_size=n,
        problems=tuple(problems),
    )
