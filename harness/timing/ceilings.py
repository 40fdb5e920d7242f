"""Measure the device's real roofs: copy bandwidth and a large bf16 GEMM.

Datasheet peaks are rarely reachable (an H200 copies at ~4.3 of its 4.8 TB/s); measured
ceilings make %SOL say how far a kernel is from what this device actually does. Both are
timed with the run's own timer and stopping rule. The GEMM multiplies random data: on zeros
the tensor cores draw less power and run ~13% faster.
"""

from __future__ import annotations

import torch

from kernelwatch.harness.device import Device
from kernelwatch.harness.timing.request import ResolvedOptions
from kernelwatch.harness.timing.roofline import Ceilings
from kernelwatch.harness.timing.sampling import summarize
from kernelwatch.harness.timing.telemetry import Probe
from kernelwatch.harness.timing.timers import Timer, time_arms

#: (bytes copied, GEMM size) per device kind: big enough to saturate an H200 (2 x 1 GiB
#: moved per copy, an 8192^3 GEMM), small enough for a CPU to finish in a second or two.
_SIZES = {"cuda": (1 << 30, 8192), "cpu": (16 << 20, 256)}


def measure_ceilings(
    device: Device, timer: Timer, probe: Probe, options: ResolvedOptions
) -> Ceilings:
    """Copy bandwidth (read plus write bytes over time) and bf16 GEMM TFLOP/s, each the
    median of the unthrottled samples."""
    copy_bytes, n = _SIZES["cuda" if device.info.kind == "cuda" else "cpu"]
    where = torch.device(device.torch_device)
    generator = torch.Generator(device=where)
    generator.manual_seed(0)
    src = torch.randn(copy_bytes // 4, generator=generator, device=where)
    dst = torch.empty_like(src)
    a, b = (
        torch.randn(n, n, generator=generator, device=where, dtype=torch.bfloat16) for _ in "ab"
    )
    c = torch.empty(n, n, device=where, dtype=torch.bfloat16)
    copy_ns = _median_ns(lambda: dst.copy_(src), timer, probe, options)
    gemm_ns = _median_ns(lambda: torch.matmul(a, b, out=c), timer, probe, options)
    return Ceilings(
        copy_gbps=2 * copy_bytes / copy_ns,  # bytes per ns is GB/s
        bf16_tflops=2 * n**3 / gemm_ns / 1e3,  # FLOP per ns is GFLOP/s
        copy_bytes=copy_bytes,
        gemm_size=n,
    )


def _median_ns(launch: object, timer: Timer, probe: Probe, options: ResolvedOptions) -> float:
    collected, _ = time_arms([launch], timer, probe, options.rule, options.warmup_s)
    summary = summarize(collected.arms[0], collected.stop)
    if summary is None:
        raise RuntimeError("every ceiling sample was taken while the GPU throttled; re-run cooler")
    return summary.median_ns
