"""Speed-of-light: achieved throughput against the device's roofline.

Pure arithmetic over the spec's FLOP/byte model and a table of datasheet peaks keyed on the
device name (``shared/reference/gpu-timing.md``). Measured ceilings (``ceilings.py``) replace
the datasheet roofs they measure, and give a roofline to devices the table lacks. A MIG slice
has a share of its GPU's SMs and memory bandwidth, so it gets no datasheet roofs at all, only
what was measured on it.

The compute roof is the dtype's dense tensor-core peak (TF32 for fp32), the roof that GEMM
and attention kernels chase. Elementwise and reduction kernels sit far below the ridge point,
so their bound is ``memory`` and their %SOL is against bandwidth, as it should be.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from kernelwatch.harness.records import SpeedOfLight

DATASHEET, MEASURED = "datasheet", "measured"

#: Bytes per element of each record dtype (the ``elem`` argument of a spec's ``min_bytes``).
#: MXFP4 packs two values a byte: its spec counts its own bytes, whatever ``elem`` says.
ELEMENT_BYTES: dict[str, int] = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "mxfp4": 1}


@dataclass(frozen=True)
class Peaks:
    """A device's roofs: HBM bandwidth (GB/s, 1e9 B/s) and dense tensor-core TFLOP/s by
    dtype, each with its source (``datasheet`` or ``measured``)."""

    model: str
    memory_gbps: float | None
    tflops: Mapping[str, float]
    memory_source: str = DATASHEET
    compute_source: Mapping[str, str] = field(default_factory=dict)

    def compute_source_of(self, dtype: str) -> str:
        return self.compute_source.get(dtype, DATASHEET)


@dataclass(frozen=True)
class Ceilings:
    """Roofs measured on the device: device-to-device copy bandwidth (read plus write bytes
    counted) and a large bf16 GEMM on random data. A ceiling that could not be measured is
    None, and ``problems`` says why."""

    copy_gbps: float | None
    bf16_tflops: float | None
    copy_bytes: int
    gemm_size: int
    problems: tuple[str, ...] = ()


#: The dtypes that share the 16-bit tensor-core roof: the measured bf16 GEMM stands for both
#: (every GPU in the table has one dense figure for bf16 and fp16).
SIXTEEN_BIT = ("bf16", "fp16")


def _peaks(
    model: str, gbps: float, bf16: float, fp8: float, tf32: float, fp4: float | None = None
) -> Peaks:
    tflops = {**dict.fromkeys(SIXTEEN_BIT, bf16), "fp8": fp8, "fp32": tf32}
    if fp4 is not None:  # Blackwell's block-scaled FP4 MMA; Hopper has none
        tflops["mxfp4"] = fp4
    return Peaks(model, gbps, tflops)


# Dense (no 2:4 sparsity) datasheet figures. Order matters: PCIe and NVL variants share
# the chip name with the SXM part but not its clocks, power or memory.
_TABLE: tuple[tuple[re.Pattern[str], Peaks], ...] = (
    (re.compile(r"\bH100\b.*\bPCIe\b"), _peaks("H100 PCIe", 2000.0, 756.0, 1513.0, 378.0)),
    (
        re.compile(r"\bH100\b(?!.*\b(?:PCIe|NVL)\b)"),
        _peaks("H100 SXM", 3350.0, 989.0, 1979.0, 495.0),
    ),
    (re.compile(r"\bH200\b(?!.*\bNVL\b)"), _peaks("H200 SXM", 4800.0, 989.0, 1979.0, 495.0)),
    (re.compile(r"\bB200\b"), _peaks("B200", 8000.0, 2250.0, 4500.0, 1100.0, 9000.0)),
)


_MIG = re.compile(r"\bMIG\b")


def datasheet_peaks(device_name: str) -> Peaks | None:
    """The datasheet roofs of a device by its name (``NVIDIA H100 80GB HBM3`` -> H100 SXM),
    or None for a device the table does not know (the CPU included) and for a MIG slice
    (``NVIDIA H100 80GB HBM3 MIG 1g.10gb``), which has only part of the GPU."""
    if _MIG.search(device_name):
        return None
    for pattern, peaks in _TABLE:
        if pattern.search(device_name):
            return peaks
    return None


def with_ceilings(peaks: Peaks | None, ceilings: Ceilings | None, device_name: str) -> Peaks | None:
    """Measured ceilings replace the roofs they measure (bandwidth; the 16-bit tensor-core
    peak, for bf16 and fp16 alike, so one kernel's %SOL does not depend on which of the two
    it runs); a device without a datasheet entry gets a roofline of its measured ceilings
    alone. A ceiling that was not measured leaves its roof as it was."""
    if ceilings is None:
        return peaks
    result = peaks or Peaks(device_name, None, {})
    if ceilings.copy_gbps is not None:
        result = replace(result, memory_gbps=ceilings.copy_gbps, memory_source=MEASURED)
    if ceilings.bf16_tflops is not None:
        result = replace(
            result,
            tflops={**result.tflops, **dict.fromkeys(SIXTEEN_BIT, ceilings.bf16_tflops)},
            compute_source={**result.compute_source, **dict.fromkeys(SIXTEEN_BIT, MEASURED)},
        )
    return result


def speed_of_light(
    flops: int, min_bytes: int, time_ns: float, dtype: str, peaks: Peaks | None
) -> SpeedOfLight:
    """Achieved TFLOP/s and GB/s at ``time_ns``, their share of the roofs, the bound and
    the share of the roofline's minimum time.

    The bound is the roof whose time (FLOPs / peak FLOP/s vs bytes / peak bandwidth) is
    longer; ``pct_sol`` is that minimum time over the measured one. Bound and %SOL need
    both roofs; any percentage whose roof is unknown is None.
    """
    if time_ns <= 0:
        raise ValueError(f"speed_of_light needs a positive time, got {time_ns} ns")
    seconds = time_ns * 1e-9
    tflops = flops / seconds / 1e12
    gbps = min_bytes / seconds / 1e9
    peak_tflops = peaks.tflops.get(dtype) if peaks else None
    peak_gbps = peaks.memory_gbps if peaks else None
    pct_compute = 100.0 * tflops / peak_tflops if peak_tflops else None
    pct_memory = 100.0 * gbps / peak_gbps if peak_gbps else None
    bound = pct_sol = None
    if peak_tflops and peak_gbps:
        compute_s = flops / (peak_tflops * 1e12)
        memory_s = min_bytes / (peak_gbps * 1e9)
        bound = "compute" if compute_s >= memory_s else "memory"
        pct_sol = 100.0 * max(compute_s, memory_s) / seconds
    sources = set()
    if peaks and peak_tflops:
        sources.add(peaks.compute_source_of(dtype))
    if peaks and peak_gbps:
        sources.add(peaks.memory_source)
    source = None if not sources else sources.pop() if len(sources) == 1 else "mixed"
    return SpeedOfLight(tflops, gbps, pct_compute, pct_memory, pct_sol, bound, source)
