"""Profiler traces built field by field from the tools' documented output
(../shared/reference/serving-results.md: Kineto's ``output_json.cpp``, Nsight Systems'
SQLite export schema), never from kernelwatch's reader: a decode step's kernels as
torch.profiler and ``nsys export --type sqlite`` would write them."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Kernel:
    """A kernel as both tools name it: Kineto's name (CUPTI's demangled name), nsys's
    demangled name (casts before integer template arguments) and its short name."""

    kineto: str
    nsys: str
    short: str
    dur_ns: int
    launches: int


FLASH = "flash_fwd_splitkv_kernel"
#: A decode step of a MoE model: the kernels and their per-launch times.
STEP = (
    Kernel("fused_moe_kernel", "fused_moe_kernel", "fused_moe_kernel", 38_200, 48),
    Kernel(
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, false, "
        "false, cutlass::bfloat16_t>, true, false>(flash::Flash_fwd_params)",
        "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, "
        "(int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t>, (bool)1, (bool)0>"
        "(flash::Flash_fwd_params)",
        FLASH,
        21_500,
        32,
    ),
    Kernel(
        "nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
        "nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
        "nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
        12_750,
        96,
    ),
    Kernel("_rms_norm_fwd_kernel", "_rms_norm_fwd_kernel", "_rms_norm_fwd_kernel", 2_100, 65),
    Kernel(
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128(ncclDevComm*, unsigned long, ncclWork*)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL128",
        9_000,
        64,
    ),
)


def chrome_trace(kernels: Sequence[Kernel] = STEP, device: str = "NVIDIA H200") -> dict[str, Any]:
    """What ``torch.profiler`` exports: CPU ops, the launch calls and, per launch, a
    ``kernel`` event on the GPU's pid (device) and tid (stream), µs with 3 decimals."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "python"}},
    ]
    ts = 1000.0
    correlation = 4000
    for kernel in kernels:
        for _ in range(kernel.launches):
            correlation += 1
            events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1234,
                           "tid": 1234, "ts": ts, "dur": 6.0,
                           "args": {"External id": correlation, "Sequence number": 7}})  # fmt: skip
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                           "pid": 1234, "tid": 1234, "ts": ts + 1.0, "dur": 3.5,
                           "args": {"cbid": 211, "correlation": correlation}})  # fmt: skip
            events.append({
                "ph": "X", "cat": "kernel", "name": kernel.kineto, "pid": 0, "tid": 7,
                "ts": round(ts + 5.0, 3), "dur": round(kernel.dur_ns / 1000, 3),
                "args": {"External id": correlation, "correlation": correlation,
                         "device": 0, "context": 1, "stream": 7, "registers per thread": 128,
                         "grid": [132, 1, 1], "block": [128, 1, 1],
                         "est. achieved occupancy %": 25},
            })  # fmt: skip
            ts += kernel.dur_ns / 1000 + 8.0
    events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",
                   "pid": 0, "tid": 7, "ts": ts, "dur": 4.2,
                   "args": {"bytes": 4096, "memory bandwidth (GB/s)": 0.97}})  # fmt: skip
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {
                "id": 0,
                "name": device,
                "totalGlobalMem": 150_000_000_000,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "cupti_version": 24,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_733_000_000_000_000_000,
        "traceEvents": events,
        "traceName": "decode_step.pt.trace.json",
    }


def cpu_only_trace() -> dict[str, Any]:
    """A profile taken without ProfilerActivity.CUDA: CPU ops only."""
    trace = chrome_trace(())
    trace["traceEvents"] = [e for e in chrome_trace(STEP[:1])["traceEvents"]
                            if e.get("cat") != "kernel"]  # fmt: skip
    return trace


_KERNEL_COLUMNS = (
    "start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
    "demangledName", "shortName", "mangledName", "launchType", "cacheConfig",
    "registersPerThread", "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
    "staticSharedMemory", "dynamicSharedMemory", "localMemoryPerThread", "localMemoryTotal",
    "gridId", "sharedMemoryExecuted", "graphNodeId", "sharedMemoryLimitConfig",
)  # fmt: skip


def nsys_sqlite(path: Path, kernels: Sequence[Kernel] = STEP, with_kernels: bool = True) -> Path:
    """What ``nsys export --type sqlite`` writes for the same step: kernel activity rows
    whose names are ids into ``StringIds``, the runtime calls, the session's start. With
    ``with_kernels`` False, a CPU-only profile: nsys creates no kernel table at all."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, "
                 "utcTime TEXT, localTime TEXT)")  # fmt: skip
    conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1733000000000000000, "
                 "'2026-12-01T02:00:00Z', '2026-12-01T02:00:00')")  # fmt: skip
    conn.execute("CREATE TABLE RUNTIME (start INTEGER, end INTEGER, eventClass INTEGER, "
                 "globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue "
                 "INTEGER, callchainId INTEGER)")  # fmt: skip
    strings: dict[str, int] = {}

    def string(value: str) -> int:
        if value not in strings:
            strings[value] = len(strings) + 1
            conn.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[value], value))
        return strings[value]

    if with_kernels:
        columns = ", ".join(f'"{c}" INTEGER' for c in _KERNEL_COLUMNS)
        conn.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({columns})")
        start, correlation = 1_733_000_000_000_000_000, 4000
        launch = string("cudaLaunchKernel_v7000")
        for kernel in kernels:
            for _ in range(kernel.launches):
                correlation += 1
                row = dict.fromkeys(_KERNEL_COLUMNS, 0)
                row |= {
                    "start": start, "end": start + kernel.dur_ns, "streamId": 7,
                    "correlationId": correlation, "globalPid": 1234 << 24,
                    "demangledName": string(kernel.nsys), "shortName": string(kernel.short),
                    "mangledName": None, "gridX": 132, "gridY": 1, "gridZ": 1, "blockX": 128,
                    "blockY": 1, "blockZ": 1, "registersPerThread": 128,
                }  # fmt: skip
                conn.execute(
                    f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                    f"({', '.join('?' * len(_KERNEL_COLUMNS))})",
                    [row[c] for c in _KERNEL_COLUMNS],
                )
                conn.execute("INSERT INTO RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, 0)",
                             (start - 5000, start - 1500, 1234, correlation, launch))  # fmt: skip
                start += kernel.dur_ns + 8000
    conn.commit()
    conn.close()
    return path


def write_json(path: Path, obj: Any) -> Path:
    path.write_text(json.dumps(obj))
    return path
