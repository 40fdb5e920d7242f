"""The built-in suite: every kernel passes its smoke workload, and every spec is well formed."""

from __future__ import annotations

import pytest

from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.cuda_kernel import CPU_REASON
from kernelwatch.harness.spec import validate_suite
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
CPU_UNSUPPORTED = {"silu_and_mul_cuda": CPU_REASON}
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


@pytest.mark.parametrize("name", SUITE.names)
def test_spec_is_complete(name):
    spec = SUITE.kernel(name)
    real = FAMILIES & set(spec.workloads)
    assert "smoke" in spec.workloads and real, f"{name}: no smoke or no real-shape workload"
    assert {"fp16", "bf16"} <= set(spec.dtypes)
    assert spec.baseline.name
    for case in (*spec.workloads["smoke"], *(c for w in real for c in spec.workloads[w])):
        assert spec.flops(case) > 0
        assert spec.min_bytes(case, 2) > 0


@pytest.mark.parametrize("name", SUITE.names)
def test_smoke_workload_covers_edge_shapes(name):
    """A size of 1 and a size no block divides, so masked tails are exercised."""
    sizes = [
        int(v)
        for case in SUITE.kernel(name).workloads["smoke"]
        for k, v in case.items()
        if k in SIZE_KEYS
    ]
    assert 1 in sizes, f"{name}: no size-1 case in smoke"
    assert any(s % 16 for s in sizes if s > 1), f"{name}: every smoke size is a multiple of 16"


@pytest.mark.parametrize("name", [s.name for s in SUITE.kernels if "llm" in s.workloads])
def test_llm_workload_spans_decode_to_long_prefill(name):
    cases = SUITE.kernel(name).workloads["llm"]
    tokens = {int(next(c[k] for k in ("tokens", "rows", "m", "seq_q") if k in c)) for c in cases}
    assert 1 in tokens and max(tokens) >= 8192


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
@pytest.mark.parametrize("name", SUITE.names)
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
