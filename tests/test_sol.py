"""Speed-of-light arithmetic, the datasheet table, and measured ceilings replacing it."""

from __future__ import annotations

import pytest

from kernelwatch.harness.timing.roofline import (
    Ceilings,
    datasheet_peaks,
    speed_of_light,
    with_ceilings,
)


@pytest.mark.parametrize(
    ("name", "model", "gbps", "bf16"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", 3350, 989),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2000, 756),
        ("NVIDIA H200", "H200 SXM", 4800, 989),
        ("NVIDIA B200", "B200", 8000, 2250),
    ],
)
def test_datasheet_is_keyed_on_the_device_name(name, model, gbps, bf16):
    peaks = datasheet_peaks(name)
    assert (peaks.model, peaks.memory_gbps, peaks.tflops["bf16"]) == (model, gbps, bf16)


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA H100 NVL",
        "NVIDIA GH200 480GB",
        "AMD EPYC",
        "A100",
        # a MIG slice has a share of the GPU's SMs and bandwidth: never the whole GPU's roofs
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        "NVIDIA H200 MIG 3g.71gb",
    ],
)
def test_unknown_devices_and_mig_slices_have_no_datasheet_peaks(name):
    assert datasheet_peaks(name) is None


def test_memory_bound_case_on_h200():
    # 1 GB moved in 250 us: 4000 GB/s of 4800; 1 GFLOP is far below the ridge point.
    sol = speed_of_light(10**9, 10**9, 250_000.0, "bf16", datasheet_peaks("NVIDIA H200"))
    assert sol.gbps == pytest.approx(4000.0)
    assert sol.tflops == pytest.approx(4.0)
    assert sol.pct_memory == pytest.approx(100 * 4000 / 4800)
    assert sol.pct_compute == pytest.approx(100 * 4 / 989)
    assert sol.bound == "memory"
    assert sol.pct_sol == pytest.approx(sol.pct_memory)
    assert sol.peak_source == "datasheet"


def test_compute_bound_gemm_uses_the_dtype_peak():
    n = 8192
    flops, bytes_ = 2 * n**3, 3 * n * n * 2
    h100 = datasheet_peaks("NVIDIA H100 80GB HBM3")
    seconds = flops / 700e12  # 700 TFLOP/s achieved
    sol = speed_of_light(flops, bytes_, seconds * 1e9, "bf16", h100)
    assert sol.bound == "compute"
    assert sol.pct_sol == pytest.approx(100 * 700 / 989)
    fp32 = speed_of_light(flops, 4 * n * n * 3, seconds * 1e9, "fp32", h100)
    assert fp32.pct_compute == pytest.approx(100 * 700 / 495)  # TF32 roof


def test_no_known_peak_gives_throughput_only():
    sol = speed_of_light(100, 400, 1000.0, "fp16", None)
    assert (sol.tflops, sol.gbps) == (pytest.approx(1e-4), pytest.approx(0.4))
    assert (sol.pct_compute, sol.pct_memory, sol.pct_sol, sol.bound, sol.peak_source) == (None,) * 5


def test_measured_ceilings_replace_what_they_measure():
    measured = Ceilings(copy_gbps=4300.0, bf16_tflops=780.0, copy_bytes=1 << 30, gemm_size=8192)
    peaks = with_ceilings(datasheet_peaks("NVIDIA H200"), measured, "NVIDIA H200")
    assert peaks.memory_gbps == 4300.0 and peaks.tflops["bf16"] == 780.0
    assert peaks.tflops["fp8"] == 1979.0 and peaks.tflops["fp32"] == 495.0  # not measured
    assert speed_of_light(10**9, 10**9, 1e6, "bf16", peaks).peak_source == "measured"
    # A device the table lacks gets a roofline from its ceilings alone.
    cpu = with_ceilings(None, measured, "AMD EPYC")
    sol = speed_of_light(10**9, 10**9, 1e6, "bf16", cpu)
    assert sol.bound is not None and sol.pct_compute is not None
    assert speed_of_light(10**9, 10**9, 1e6, "fp32", cpu).bound is None


def test_time_must_be_positive():
    with pytest.raises(ValueError, match="positive time"):
        speed_of_light(1, 1, 0.0, "fp16", None)


def test_the_measured_16_bit_roof_stands_for_fp16_as_well():
    """bf16 and fp16 share the tensor cores' dense peak: replacing only bf16 made the same
    kernel's %SOL depend on which of the two it ran in."""
    measured = Ceilings(copy_gbps=4300.0, bf16_tflops=780.0, copy_bytes=1 << 30, gemm_size=8192)
    peaks = with_ceilings(datasheet_peaks("NVIDIA H200"), measured, "NVIDIA H200")
    assert peaks.tflops["fp16"] == 780.0
    n = 8192
    flops, seconds = 2 * n**3, 2 * n**3 / 700e12
    bf16 = speed_of_light(flops, 3 * n * n * 2, seconds * 1e9, "bf16", peaks)
    fp16 = speed_of_light(flops, 3 * n * n * 2, seconds * 1e9, "fp16", peaks)
    assert bf16.pct_sol == fp16.pct_sol and fp16.peak_source == "measured"


def test_a_ceiling_that_was_not_measured_leaves_its_roof_alone():
    copy_only = Ceilings(4300.0, None, 1 << 30, 8192, problems=("bf16 GEMM: out of memory",))
    peaks = with_ceilings(datasheet_peaks("NVIDIA H200"), copy_only, "NVIDIA H200")
    assert peaks.memory_gbps == 4300.0 and peaks.memory_source == "measured"
    assert peaks.tflops["bf16"] == 989.0 and peaks.compute_source_of("bf16") == "datasheet"
    gemm_only = Ceilings(None, 780.0, 1 << 30, 8192)
    peaks = with_ceilings(datasheet_peaks("NVIDIA H200"), gemm_only, "NVIDIA H200")
    assert peaks.memory_gbps == 4800.0 and peaks.tflops["bf16"] == 780.0
