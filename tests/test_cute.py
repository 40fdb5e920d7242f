"""CuTe DSL kernels in a suite (issue 50, item 1): a repository whose kernel is a
``@cute.jit`` function (tests/cute_suite/suite.py) is built offline for sm_90a and sm_100a
like a Triton one (registers, spills, SASS), a planted register-spill change in it is a
static regression, and on the CPU its cases are unsupported in one line while the rest of
the suite runs. The built-in suite's CuTe DSL SwiGLU (kernels/silu_cute.py) names its
function, so the suite imports without the DSL, and builds for both targets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import git, repository_of

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl (kernelwatch[cute]) is not installed")

from kernelwatch.harness.build.stage import BuildRequest, run_build
from kernelwatch.harness.cute_kernel import ABSENT_REASON, CPU_REASON, CuteKernel
from kernelwatch.harness.spec import KernelUnsupported
from kernelwatch.harness.suite import SuiteRef

SUITE = Path(__file__).parent / "cute_suite" / "suite.py"
#: The planted change: 256 values held live across a loop, past the register file.
SPILLING = """        held = cute.make_rmem_tensor(256, cutlass.Float32)
        for j in cutlass.range_constexpr(256):
            held[j] = g_up[(i + j * 4099) % n]
        total = 0.0
        for j in cutlass.range_constexpr(256):
            total = total + held[j] * held[255 - j]
        gate = g_gate[i]
        g_out[i] = gate / (1.0 + cute.math.exp(-gate)) * total"""
PLAIN = """        gate = g_gate[i]
        g_out[i] = gate / (1.0 + cute.math.exp(-gate)) * g_up[i]"""


@pytest.fixture
def repository(tmp_path):
    """A kernel repository: the CuTe suite, then a commit that makes its kernel spill."""
    repo = tmp_path / "repo"
    base = repository_of(repo, {"suite.py": SUITE}, "a CuTe DSL kernel")
    source = (repo / "suite.py").read_text()
    assert PLAIN in source
    (repo / "suite.py").write_text(source.replace(PLAIN, SPILLING))
    git(repo, "commit", "-qam", "hold 256 values live")
    return repo, base, git(repo, "rev-parse", "HEAD")


@pytest.mark.slow  # the build stage end to end, a DSL process a target and revision
def test_a_cute_kernel_is_built_for_both_targets_and_a_planted_spill_is_flagged(
    repository, kernelwatch_cli
):
    repo, base, head = repository
    diff = kernelwatch_cli(
        "build-diff", base, head, "--repo", str(repo), "--suite", "suite.py",
        "--arch", "sm_90a,sm_100a", "--json", "--metrics", "--no-cache", cwd=repo,
    )  # fmt: skip
    assert diff.returncode == 1, diff.stdout + diff.stderr
    lines = [json.loads(line) for line in diff.stdout.splitlines()]
    before = {p["before"]["arch"]: p["before"] for p in lines if p["kind"] == "build_pair"}
    assert set(before) == {"sm_90a", "sm_100a"}
    for r in before.values():
        assert (r["status"], r["language"], r["function"]) == ("ok", "cute", "silu_mul"), r
        assert 0 < r["registers"] < 64 and r["spill_store_bytes"] == 0, r
        assert r["tensor_core"] == "none" and r["instructions"] > 0, r
        assert any(op.startswith("MUFU") for op in r["opcodes"]), r  # the exp of SiLU
        assert r["toolchain"]["cutlass-dsl"] == "4.8.1", r
    spills = {f["arch"]: f["message"] for f in lines if f.get("rule") == "spills"}
    assert set(spills) == {"sm_90a", "sm_100a"}, lines
    assert all(m.startswith("starts spilling (registers") for m in spills.values()), spills


def test_on_the_cpu_a_cute_kernel_is_unsupported_in_one_line_and_the_rest_runs(
    tmp_path, kernelwatch_cli
):
    suite = tmp_path / "suite.py"
    suite.write_text(
        SUITE.read_text()
        + "\nfrom kernelwatch.kernels.rmsnorm import RMS_NORM\n"
        + 'SUITE = Suite("cute_demo", (SILU_MUL_CUTE, RMS_NORM))\n'
    )
    checked = kernelwatch_cli(
        "check", "--suite", str(suite), "--workload", "smoke", "--dtype", "fp32", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    verdicts = [json.loads(line) for line in checked.stdout.splitlines()]
    cute = [v for v in verdicts if v["case"]["kernel"] == "silu_mul_cute"]
    assert [(v["verdict"], v["reason"]) for v in cute] == [("unsupported", CPU_REASON)]
    rest = [v["verdict"] for v in verdicts if v["case"]["kernel"] == "rms_norm"]
    assert rest and set(rest) == {"pass"}


@pytest.mark.slow  # the build stage end to end, a DSL process a target
def test_the_builtin_cute_kernel_is_built_for_both_targets():
    request = BuildRequest(SuiteRef(), archs=("sm_90a", "sm_100a"), kernels=("silu_and_mul_cute",),
                           workload="smoke", dtypes=("bf16",), workers=1)  # fmt: skip
    built = run_build(request)
    records = built.records
    # Dynamic layouts: one compile a target serves the four smoke cases (a padded row, a
    # (4, 1) output among them), each case's recipe naming it.
    assert sorted(r.arch for r in records) == ["sm_100a", "sm_90a"]
    assert {r.case for r in records} == {"tokens=1 intermediate=1100"}
    assert len(built.recipes) == 4
    for r in records:
        assert (r.status, r.language, r.function) == ("ok", "cute", "silu_and_mul"), r
        assert 0 < r.registers < 64 and r.spill_store_bytes == 0, r
        assert any(op.startswith("MUFU") for op in r.opcodes), r  # the exp of SiLU
        assert r.toolchain["cutlass-dsl"] == "4.8.1", r


def test_a_named_cute_kernel_is_imported_only_to_run_on_a_gpu():
    """The built-in suite imports, and its CuTe DSL case is refused on the CPU, without the
    DSL; a GPU host without the optional extra refuses it in one line, saying what to
    install."""
    probe = (
        "import sys, torch\n"
        "from kernelwatch.kernels import SUITE\n"
        "spec = SUITE.kernel('silu_and_mul_cute')\n"
        "x = torch.ones(2, 8); out = torch.empty(2, 4)\n"
        "try:\n"
        "    spec.launch({'x': x}, {'out': out}, {}, None)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.startswith(('cutlass', 'kernelwatch.kernels.cute'))))\n"
    )  # fmt: skip
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"KernelUnsupported {CPU_REASON}",
        "[]",
    ]

    class OnGpu:  # what the launch reads of a tensor on a GPU
        device = type("Device", (), {"type": "cuda"})()

        def data_ptr(self) -> int:
            return 0

    kernel = CuteKernel("kernelwatch.kernels.cute_dsl.silu_and_mul:silu_and_mul")
    assert kernel.function == "silu_and_mul"
    assert kernel.source.name == "silu_and_mul.py" and kernel.source.parent.name == "cute_dsl"
    import importlib.util

    real = importlib.util.find_spec
    absent = pytest.MonkeyPatch()
    absent.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "cutlass" else real(n, *a)
    )
    try:
        with pytest.raises(KernelUnsupported, match="nvidia-cutlass-dsl is not installed"):
            kernel.launch(OnGpu(), OnGpu(), 256)
    finally:
        absent.undo()
    assert ABSENT_REASON.endswith("(pip install 'kernelwatch[cute]')")
    with pytest.raises(ValueError, match=r"'package\.module:function'"):
        CuteKernel("kernelwatch.kernels.cute_dsl.silu_and_mul")


def test_a_dynamic_layout_is_specialised_on_dtype_rank_and_leading_dimension_only():
    import torch

    static = CuteKernel("kernelwatch.kernels.cute_dsl.silu_and_mul:silu_and_mul")
    dynamic = CuteKernel("kernelwatch.kernels.cute_dsl.silu_and_mul:silu_and_mul", dynamic=True)
    x = torch.empty(3, 98, dtype=torch.bfloat16)[:, :80]  # a padded row
    assert static.specialised(x) == ("tensor", "torch.bfloat16", (3, 80), (98, 1))
    assert dynamic.specialised(x) == ("tensor", "torch.bfloat16", (None, None), (None, 1))
    # A one-wide output keeps the last unit stride: the same compile as every other width.
    column = torch.empty(4, 1, dtype=torch.bfloat16)
    assert column.stride() == (1, 1)
    assert dynamic.specialised(column) == dynamic.specialised(x)
    transposed = torch.empty(5, 3).t()
    assert dynamic.specialised(transposed)[2:] == ((None, None), (1, None))
    assert dynamic.specialised(torch.empty(5, 3)[:, ::2])[2:] == ((None, None), (None, None))
