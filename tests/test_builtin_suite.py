"""The built-in suite: every kernel passes its smoke workload, and every spec is well formed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kernelwatch.harness.build.sass import FP4_DTYPES
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.cuda_kernel import CPU_REASON
from kernelwatch.harness.cute_kernel import CPU_REASON as CUTE_CPU_REASON
from kernelwatch.harness.spec import DistributedSpec, KernelSpec, validate_suite
from kernelwatch.kernels import SUITE

REQUIRED = {
    "rms_norm",
    "fused_add_rms_norm",
    "softmax",
    "silu_and_mul",
    "rope",
    "gemm",
    "flash_attention",
}
#: Kernels of the suite that cannot run their smoke workload on the CPU, with the reason each
#: of their cases reports instead; every other kernel must pass it everywhere.
CPU_UNSUPPORTED = {"silu_and_mul_cuda": CPU_REASON, "silu_and_mul_cute": CUTE_CPU_REASON}
SIZE_KEYS = (
    "tokens",
    "hidden",
    "rows",
    "cols",
    "intermediate",
    "m",
    "n",
    "k",
    "seq_q",
    "seq_k",
    "head_dim",
    "heads_q",
    "frames",
    "channels",
)
#: The workloads of real shapes a spec may have beside ``smoke``: dense LLMs from decode to
#: prefill, decode alone (1-64 tokens in flight), mixture-of-experts and speech models.
FAMILIES = {"llm", "decode", "moe", "asr"}


def test_suite_has_the_llm_serving_kernels():
    assert validate_suite(SUITE) == []
    assert set(SUITE.names) >= REQUIRED
    assert set(SUITE.names) >= set(CPU_UNSUPPORTED)


# The checks every built-in kernel's spec passes, as functions of the spec, so that
# tests/test_add_kernel.py runs them on a copy of the suite with a kernel added.


def check_spec_is_complete(spec: KernelSpec | DistributedSpec) -> None:
    real = FAMILIES & set(spec.workloads)
    assert "smoke" in spec.workloads and real, f"{spec.name}: no smoke or no real-shape workload"
    # An FP4 GEMM has no 16-bit form: its operands are e2m1 whatever it writes.
    assert {"fp16", "bf16"} <= set(spec.dtypes) or set(spec.dtypes) <= FP4_DTYPES, spec.dtypes
    assert spec.baseline.name
    for case in (*spec.workloads["smoke"], *(c for w in real for c in spec.workloads[w])):
        assert spec.flops(case) > 0
        assert spec.min_bytes(case, 2) > 0


def check_smoke_workload_covers_edge_shapes(spec: KernelSpec | DistributedSpec) -> None:
    """A size of 1 and a size no block divides, so masked tails are exercised."""
    sizes = [int(v) for case in spec.workloads["smoke"] for k, v in case.items() if k in SIZE_KEYS]
    assert 1 in sizes, f"{spec.name}: no size-1 case in smoke"
    assert any(s % 16 for s in sizes if s > 1), f"{spec.name}: every smoke size is a multiple of 16"


def check_llm_workload_spans_decode_to_long_prefill(spec: KernelSpec | DistributedSpec) -> None:
    if "llm" not in spec.workloads:
        return
    cases = spec.workloads["llm"]
    tokens = {int(next(c[k] for k in ("tokens", "rows", "m", "seq_q") if k in c)) for c in cases}
    assert 1 in tokens and max(tokens) >= 8192, f"{spec.name}: llm tokens {sorted(tokens)}"


def check_has_a_family(spec: KernelSpec | DistributedSpec) -> None:
    """The dashboards' kernel pickers group the built-in kernels by family."""
    assert spec.family, f"{spec.name}: no family; name one with KernelSpec(family=...)"


@pytest.mark.parametrize("name", SUITE.names)
def test_spec_is_complete(name):
    check_spec_is_complete(SUITE.kernel(name))


@pytest.mark.parametrize("name", SUITE.names)
def test_smoke_workload_covers_edge_shapes(name):
    check_smoke_workload_covers_edge_shapes(SUITE.kernel(name))


@pytest.mark.parametrize("name", [s.name for s in SUITE.kernels if "llm" in s.workloads])
def test_llm_workload_spans_decode_to_long_prefill(name):
    check_llm_workload_spans_decode_to_long_prefill(SUITE.kernel(name))


@pytest.mark.parametrize("name", SUITE.names)
def test_every_builtin_kernel_has_a_family(name):
    check_has_a_family(SUITE.kernel(name))


#: The families the dashboards grouped the built-in kernels in before a spec declared its
#: own: the default rule keeps each of them where it was.
FAMILY_OF = {
    "rms_norm": "norm", "fused_add_rms_norm": "norm", "softmax": "elementwise",
    "silu_and_mul": "elementwise", "silu_and_mul_cuda": "elementwise",
    "silu_and_mul_cute": "elementwise", "rope": "elementwise",
    "gemm": "gemm", "fp8_block_gemm": "gemm", "fp8_group_quant": "gemm", "mxfp4_gemm": "gemm",
    "flash_attention": "attention", "paged_decode_attention": "attention",
    "mla_decode": "attention", "fused_moe": "moe", "conformer_conv": "asr",
    "sliding_window_decode_attention": "attention",
}  # fmt: skip


def test_builtin_kernels_keep_their_families():
    assert {name: SUITE.kernel(name).family for name in FAMILY_OF} == FAMILY_OF


@pytest.mark.parametrize(
    ("name", "dtype"),
    [(s.name, d) for s in SUITE.kernels for d in ("fp32", "fp16", *FP4_DTYPES) if d in s.dtypes],
)
def test_smoke_passes(name, dtype, device):
    spec = SUITE.kernel(name)
    why = CPU_UNSUPPORTED.get(name) if device.info.kind == "cpu" else None
    for params in spec.workloads["smoke"]:
        result = check_case(spec, SUITE.name, "smoke", params, dtype, device)
        if why:
            assert (result.verdict, result.reason) == ("unsupported", why), params
            continue
        assert result.verdict == "pass", f"{name} {params} {dtype}: {result.reason}"
        assert result.deterministic is True
        assert result.config is not None
    if why:
        pytest.skip(f"{name} cannot run its smoke workload on the CPU: {why}")


def test_bf16_reports_unsupported_on_cpu(device):
    if device.info.kind != "cpu":
        pytest.skip("on a GPU bf16 runs")
    spec = SUITE.kernel("gemm")
    result = check_case(spec, SUITE.name, "smoke", spec.workloads["smoke"][0], "bf16", device)
    assert result.verdict == "unsupported"
    assert "bf16" in result.reason


def test_gemm_model_counts():
    gemm = SUITE.kernel("gemm")
    case = {"m": 2048, "n": 6144, "k": 4096, "b_layout": "nk"}
    assert gemm.flops(case) == 2 * 2048 * 6144 * 4096
    assert gemm.min_bytes(case, 2) == 2 * (2048 * 4096 + 4096 * 6144 + 2048 * 6144)


#: A padded row of the suite's ``randn`` and every built-in spec's inputs (each workload's
#: cases in each of its dtypes) on the meta device; the smoke cases also on the CPU, whose
#: tensors' shapes, strides and dtypes the meta ones must have. Prints the mismatches, then
#: whether Dynamo was loaded.
_META_INPUTS = """
import sys, torch
from kernelwatch.harness.spec import DTYPES, KernelSpec
from kernelwatch.kernels import SUITE
from kernelwatch.kernels.inputs import randn
def layout(inputs):
    return {k: (tuple(v.shape), v.stride(), v.dtype) for k, v in inputs.items()
            if isinstance(v, torch.Tensor)}
for device in ("meta", "cpu"):
    t = randn((3, 8), torch.float16, torch.device(device), torch.Generator(), row_pad=4)
    if (tuple(t.shape), t.stride(), t.dtype, t.device.type) != ((3, 8), (12, 1), torch.float16,
                                                                device):
        print("mismatch randn", device, tuple(t.shape), t.stride(), t.dtype)
for spec in [s for s in SUITE.kernels if isinstance(s, KernelSpec)]:
    for workload, cases in spec.workloads.items():
        for params in cases:
            for dtype in spec.dtypes:
                make = lambda device: spec.make_inputs(
                    params, DTYPES[dtype], torch.device(device), torch.Generator().manual_seed(0))
                meta = layout(make("meta"))
                if workload == "smoke" and meta != layout(make("cpu")):
                    print("mismatch", spec.name, params, dtype)
print("torch._dynamo" in sys.modules)
"""


def test_inputs_on_the_meta_device_have_the_cpus_layout_and_load_no_dynamo():
    """The build records each launch on the meta device, where torch.randn and any arithmetic
    run a Python reference that imports Dynamo: 1.6 s of every build worker's CPU
    (docs/TESTING.md). fp8's block scales and rope's cos/sin cache were computed there too:
    planning the serving kernels' builds took 8.2 s of CPU."""
    proc = subprocess.run([sys.executable, "-c", _META_INPUTS], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False"], proc.stdout[-2000:]
