"""The FP8 tensor-core path as a static metric: what ptxas emits for e4m3 ``tl.dot`` on
sm_90a (QGMMA) and sm_100a (UTCQMMA) is its own class, and losing it is a regression; the
store and dashboards rank it the same way."""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace

import pytest
from planted.mutants import Mutation, mutant_source

from kernelwatch.analysis.static_diff import compare
from kernelwatch.dashboards.builds import TENSOR_CORE_NAMES
from kernelwatch.harness.build.sass import FP4_TENSOR_CORES, FP8_TENSOR_CORES, TENSOR_CORE_RANK
from kernelwatch.harness.build.stage import BuildRequest, run_build
from kernelwatch.harness.records import BuildMetrics
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.store import migrate

BASE = BuildMetrics(
    "builtin", "fp8_block_gemm", "fp8_block_gemm_kernel", "triton", "sm_90a", None, "ok",
    registers=161, spill_store_bytes=0, spill_load_bytes=0, num_warps=4, tensor_core="QGMMA",
    instructions=1000, dtype="fp8",
)  # fmt: skip


def _tensor_core_findings(before: str, after: str, arch: str = "sm_90a") -> list[str]:
    old = replace(BASE, tensor_core=before, arch=arch)
    return [
        f.message for f in compare(old, replace(old, tensor_core=after)) if f.rule == "tensor_core"
    ]


@pytest.mark.parametrize(
    ("arch", "fp8", "wider"), [("sm_90a", "QGMMA", "HGMMA"), ("sm_100a", "UTCQMMA", "tcgen05")]
)
def test_losing_the_fp8_path_is_a_regression(arch, fp8, wider):
    assert _tensor_core_findings(fp8, wider, arch) == ["lost its FP8 tensor-core path"]
    assert _tensor_core_findings(fp8, "HMMA", arch) == ["lost its FP8 tensor-core path"]
    assert _tensor_core_findings(wider, fp8, arch) == []
    assert fp8 in FP8_TENSOR_CORES and wider not in FP8_TENSOR_CORES


@pytest.mark.parametrize("fallback", ["UTCQMMA", "tcgen05", "HMMA"])
def test_an_fp4_gemm_falling_back_from_the_block_scaled_mma_is_a_regression(fallback):
    """Issue 50: sm_100a's block-scaled FP4 MMA (UTCOMMA) was filed under plain tcgen05, so an
    FP4 GEMM that fell back to an fp8 or 16-bit MMA went unseen."""
    assert _tensor_core_findings("UTCOMMA", fallback, "sm_100a") == [
        "lost its FP4 tensor-core path"
    ]
    assert _tensor_core_findings(fallback, "UTCOMMA", "sm_100a") == []
    assert "UTCOMMA" in FP4_TENSOR_CORES


def test_the_store_ranks_tensor_cores_as_the_rules_do():
    """``report_build_history`` writes TENSOR_CORE_RANK as SQL; a class added to one and not
    the other would reach the builds dashboard with no rank."""
    view = (migrate.VIEWS_DIR / "report_build_history.sql").read_text()
    frozen = dict(re.findall(r"WHEN '(\w+)' THEN (\d+)", view))
    assert {k: int(v) for k, v in frozen.items()} == TENSOR_CORE_RANK
    assert set(TENSOR_CORE_NAMES) == set(TENSOR_CORE_RANK.values())


# One block-scaled GEMM at one 64x128 tile, and the same kernel with its e4m3 operands widened
# to fp16 before the MMA: the change a "fix" for an fp8 accuracy report might make.
_WIDENED = Mutation(
    "fp8",
    'partial = tl.dot(a, b, input_precision="tf32")',
    'partial = tl.dot(a.to(tl.float16), b.to(tl.float16), input_precision="tf32")',
    "e4m3 operands widened before the MMA",
)
_SUITE = textwrap.dedent(
    """
    from dataclasses import replace

    from kernelwatch.harness.spec import Suite
    from kernelwatch.kernels import fp8
    import widened

    CASE = {"m": 64, "n": 256, "k": 512, "block": 128, "fp8_out": "bf16"}


    def one_tile(spec, name):
        config = fp8.FP8_GEMM_CONFIGS[3]
        return replace(
            spec, name=name, workloads={"llm": (CASE,)}, dtypes=("fp8",), configs=(config,),
            pinned_config=config,
        )


    SUITE = Suite("fp8path", (one_tile(fp8.FP8_BLOCK_GEMM, "fp8"),
                              one_tile(widened.FP8_BLOCK_GEMM, "widened")))
    """
)


@pytest.mark.slow  # the build stage end to end: its children, in their sandbox
def test_fp8_gemm_compiles_to_fp8_tensor_cores_and_widening_is_flagged(tmp_path):
    (tmp_path / "widened.py").write_text(mutant_source(_WIDENED))
    (tmp_path / "suite.py").write_text(_SUITE)
    request = BuildRequest(
        SuiteRef("suite.py", str(tmp_path)), archs=("sm_90a", "sm_100a"), workers=2
    )
    records = {(r.kernel, r.arch): r for r in run_build(request).records}
    assert {k: r.status for k, r in records.items()} == dict.fromkeys(records, "ok")
    assert records["fp8", "sm_90a"].tensor_core == "QGMMA"
    assert records["fp8", "sm_100a"].tensor_core == "UTCQMMA"
    assert any(op.startswith("QGMMA.") and "E4M3" in op for op in records["fp8", "sm_90a"].opcodes)
    for arch, wider in (("sm_90a", "HGMMA"), ("sm_100a", "tcgen05")):
        after = replace(records["widened", arch], kernel="fp8")
        assert after.tensor_core == wider
        lost = [f for f in compare(records["fp8", arch], after) if f.rule == "tensor_core"]
        assert [(f.before, f.after) for f in lost] == [(records["fp8", arch].tensor_core, wider)]
