"""The block-scaled FP4 GEMM (issue 50, item 2): MXFP4 operands through ``tl.dot_scaled``,
its quantiser, checked against the float64 product of the values it dequantises to; for
sm_100a it compiles to the block-scaled FP4 MMA, for sm_90a to an emulation that says so."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest
import torch

from kernelwatch.harness.build.sass import FP4_DTYPES, emulation
from kernelwatch.harness.build.stage import BuildRequest, run_build
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.spec import DTYPES
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.kernels import SUITE
from kernelwatch.kernels.fp4 import E2M1, MX_GROUP, dequantize_mxfp4, quantize_mxfp4

SPEC = SUITE.kernel("mxfp4_gemm")


def test_values_on_the_grid_survive_the_quantiser_and_each_group_fills_its_top_binade():
    gen = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 8, (4, 2 * MX_GROUP), generator=gen)
    signs = torch.where(torch.rand(4, 2 * MX_GROUP, generator=gen) < 0.5, -1.0, 1.0)
    codes[:, 0] = codes[:, MX_GROUP] = 7  # each group's largest magnitude is 6
    exact = torch.tensor(E2M1)[codes] * signs * torch.tensor([[2.0**-3], [1.0], [4.0], [2.0**9]])
    packed, scales = quantize_mxfp4(exact)
    assert packed.shape == (4, MX_GROUP) and scales.shape == (4, 2)
    assert torch.equal(dequantize_mxfp4(packed, scales), exact.double())
    values = torch.randn(16, 4 * MX_GROUP, generator=gen) * 37.0
    back = dequantize_mxfp4(*quantize_mxfp4(values))
    top = back.abs().reshape(16, 4, MX_GROUP).amax(-1)
    scale = 2.0 ** (scales_of(values) - 127)
    assert torch.all((top >= 4 * scale) & (top <= 6 * scale))
    # One mantissa bit: within half the grid's widest gap (4 to 6) of the value, and a group's
    # largest value (under 8 scales) saturates to 6 scales: never more than 2 scales off.
    error = (back - values.double()).abs()
    assert torch.all(error < 2 * scale.repeat_interleave(MX_GROUP, 1))


def scales_of(values: torch.Tensor) -> torch.Tensor:
    return quantize_mxfp4(values)[1].double()


def test_the_smoke_cases_pass_in_the_interpreter_and_a_misread_scale_fails(device):
    for params in SPEC.workloads["smoke"]:
        result = check_case(SPEC, SUITE.name, "smoke", params, "mxfp4", device)
        assert result.verdict == "pass", result.reason
        assert result.rel_error < 1e-3
    # The kernel handed each row's scales one group late: off by up to 256x.
    misread = dataclasses.replace(
        SPEC,
        launch=lambda t, o, p, cfg: SPEC.launch(
            {**t, "a_scales": t["a_scales"].roll(1, dims=1).contiguous()}, o, p, cfg
        ),
    )
    wrong = check_case(misread, SUITE.name, "smoke", SPEC.workloads["smoke"][1], "mxfp4", device)
    assert wrong.verdict == "fail", wrong


def test_an_fp4_build_without_the_fp4_mma_says_it_is_an_emulation():
    assert all(d in DTYPES for d in FP4_DTYPES)
    assert emulation("mxfp4", "UTCOMMA") is None
    assert (
        emulation("mxfp4", "HGMMA") == "emulated: no FP4 tensor-core MMA (HGMMA on upcast operands)"
    )
    assert emulation("fp8", "HGMMA") is None


_SUITE = textwrap.dedent(
    """
    from dataclasses import replace

    from kernelwatch.harness.spec import Suite
    from kernelwatch.kernels import fp4

    CASE = {"m": 64, "n": 256, "k": 512, "out": "bf16"}
    config = fp4.MXFP4_GEMM_CONFIGS[0]
    SUITE = Suite("fp4path", (replace(
        fp4.MXFP4_GEMM, workloads={"llm": (CASE,)}, configs=(config,), pinned_config=config),))
    """
)


@pytest.mark.slow  # the build stage end to end: its children, in their sandbox
def test_the_sm100a_build_runs_the_block_scaled_fp4_mma_and_sm90a_is_an_emulation(tmp_path):
    (tmp_path / "suite.py").write_text(_SUITE)
    request = BuildRequest(
        SuiteRef("suite.py", str(tmp_path)), archs=("sm_90a", "sm_100a"), workers=2
    )
    records = {r.arch: r for r in run_build(request).records}
    assert {a: r.status for a, r in records.items()} == {"sm_90a": "ok", "sm_100a": "ok"}
    blackwell, hopper = records["sm_100a"], records["sm_90a"]
    assert blackwell.dtype == "mxfp4" and blackwell.tensor_core == "UTCOMMA"
    assert emulation(blackwell.dtype, blackwell.tensor_core) is None
    assert hopper.tensor_core == "HGMMA"
    assert emulation(hopper.dtype, hopper.tensor_core).startswith("emulated")


def test_off_sm100_the_kernel_is_timed_alone_and_says_why_it_has_no_baseline(device):
    """cuBLAS's FP4 GEMM needs Blackwell: elsewhere the stock baseline cannot run, which
    made the whole case unsupported; the kernel is timed alone now, with the one line."""
    from kernelwatch.harness.records import CaseId
    from kernelwatch.harness.timing.case import prepare

    params = SPEC.workloads["smoke"][0]
    case = CaseId(SUITE.name, SPEC.name, "smoke", dict(params), "mxfp4")
    prepared = prepare(SPEC, case, device, 0, SPEC.pinned_config)
    assert prepared.baseline is None
    assert prepared.baseline_missing == (
        "no baseline here: torch._scaled_mm's MXFP4 path (cuBLAS block-scaled FP4) needs an "
        "sm_100 GPU"
    )
