"""Issue 44, item 4: the self-check's traced decode step. The functions a kernel launches are
named as they launch (``launcher.observing``), and a Kineto trace of the step, built field by
field from the documented format (``trace_files.py``), is read into the share table the
self-check judges (``serving/step_trace.py``)."""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from trace_files import FLASH, STEP, Kernel, chrome_trace

from kernelwatch.harness.cuda_kernel import CudaKernel
from kernelwatch.harness.launcher import observing
from kernelwatch.harness.spec import KernelUnsupported
from kernelwatch.serving.step_trace import LABEL, read_step


@triton.jit
def _copy_kernel(x, y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y + offsets, tl.load(x + offsets, mask=offsets < n), mask=offsets < n)


def test_the_functions_launched_are_named_in_order_and_still_run():
    x = torch.arange(8, dtype=torch.float32)
    y = torch.zeros_like(x)
    cuda = CudaKernel(Path("scale.cu"))
    with observing() as seen:
        _copy_kernel[(1,)](x, y, 8, BLOCK=8)
        _copy_kernel[(1,)](x, y, 8, BLOCK=8)
        # On the CPU a CUDA C++ launch is refused; it was still asked for by its entry.
        with pytest.raises(KernelUnsupported):
            cuda.launch("scale_rows", (1, 1, 1), (32, 1, 1), [x])
    assert seen.functions == ["_copy_kernel", "_copy_kernel", "scale_rows"]
    assert torch.equal(y, x)
    # Outside, nothing is named and Triton's own launcher is back.
    with observing() as again:
        pass
    _copy_kernel[(1,)](x, y, 8, BLOCK=8)
    assert again.functions == []


def _data(trace: dict, kernels: list[dict], steps: int = 1, gz: bool = True) -> dict:
    raw = json.dumps(trace).encode()
    raw = gzip.compress(raw) if gz else raw
    return {"steps": steps, "kernels": kernels, "errors": [],
            "trace_gz": base64.b64encode(raw).decode()}  # fmt: skip


#: The step's kernels as kernelwatch's child would name them: fused_moe's Triton function,
#: the attention kernel measured against FlashAttention, rms_norm's Triton function.
KERNELS = [
    {"kernel": "fused_moe", "functions": ["fused_moe_kernel"] * 48, "baseline": "torch"},
    {"kernel": "attention", "functions": [], "baseline": "flash_attn (FlashAttention-2)"},
    {"kernel": "rms_norm", "functions": ["_rms_norm_fwd_kernel"] * 65, "baseline": "torch"},
]


@pytest.mark.parametrize("gz", [True, False])
def test_a_real_format_step_is_read_into_matched_and_unmatched_shares(gz):
    data = read_step(_data(chrome_trace(), KERNELS, gz=gz))
    assert "trace_gz" not in data and data["kernel_events"] is True
    assert data["device"] == "NVIDIA H200"
    total = sum(k.dur_ns * k.launches for k in STEP)
    assert data["gpu_ns"] == data["rows_gpu_ns"] == total
    by_trace = {r["trace"].split("<")[0]: r for r in data["rows"]}
    assert by_trace["fused_moe_kernel"]["kernel"] == "fused_moe"
    assert by_trace["void flash::" + FLASH]["role"] == "baseline"
    assert by_trace["void flash::" + FLASH]["kernel"] == "attention"
    assert by_trace["nvjet_hsh_256x128_64x4_2x1_v_bz_TNN"]["kernel"] is None  # cuBLAS: no one's
    matched = sum(k.dur_ns * k.launches for k in STEP[:2] + STEP[3:4]) / total
    assert data["matched_share"] == pytest.approx(matched)
    assert data["matched_share"] + data["unmatched_share"] == pytest.approx(1.0, abs=1e-12)
    assert data["functions"] == {
        "_rms_norm_fwd_kernel": {"expected": 65, "found": 65},
        "fused_moe_kernel": {"expected": 48, "found": 48},
    }


def test_launches_are_counted_per_step():
    step = (Kernel("_rms_norm_fwd_kernel", "", "", 2_000, 3 * 2),)  # two a step, three steps
    kernels = [{"kernel": "rms_norm", "functions": ["_rms_norm_fwd_kernel"] * 2, "baseline": ""}]
    data = read_step(_data(chrome_trace(step), kernels, steps=3))
    assert data["functions"] == {"_rms_norm_fwd_kernel": {"expected": 6, "found": 6}}
    fewer = read_step(_data(chrome_trace(step), kernels, steps=4))
    assert fewer["functions"] == {"_rms_norm_fwd_kernel": {"expected": 8, "found": 6}}


def test_a_cpu_profile_says_so_and_a_damaged_one_is_an_error():
    cpu_only = {"schemaVersion": 1, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "kernelwatch_step", "ts": 1.0, "dur": 9.0},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 2.0, "dur": 1.0},
    ]}  # fmt: skip
    data = read_step(_data(cpu_only, KERNELS[:1]))
    assert data["kernel_events"] is False and "trace_gz" not in data
    assert data["line"].startswith(f"{LABEL}: a torch.profiler trace with no GPU kernel events")
    damaged = read_step({**_data(cpu_only, KERNELS[:1]), "trace_gz": "not base64!"})
    assert "error" in damaged and "\n" not in damaged["error"]
    truncated = _data(cpu_only, KERNELS[:1], gz=False)
    raw = base64.b64decode(truncated["trace_gz"])[:40]
    cut = read_step({**truncated, "trace_gz": base64.b64encode(raw).decode()})
    assert cut["error"].startswith(f"{LABEL}: not JSON")


def test_a_step_that_failed_comes_back_as_it_was():
    failed = {"error": "RuntimeError: no profiler"}
    assert read_step(failed) == failed
