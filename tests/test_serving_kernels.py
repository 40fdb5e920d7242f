"""The serving kernels of the built-in suite (MoE, FP8, split-K decode GEMM, paged and MLA
decode attention, the Conformer conv module): well-formed specs whose workloads come from
published model configs, smoke cases that pass in the interpreter, and FLOP/byte models."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from kernelwatch.harness.build.plan import default_dtypes
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.spec import validate_suite
from kernelwatch.kernels import SUITE, models
from kernelwatch.kernels.decode_attention import seq_lens_of
from kernelwatch.kernels.gemm import DECODE_CONFIGS
from kernelwatch.kernels.moe import Routing, align_to_blocks, route_reference

SERVING = {
    "fused_moe": "moe",
    "fp8_block_gemm": "decode",
    "fp8_group_quant": "decode",
    "paged_decode_attention": "decode",
    "mla_decode": "decode",
    "conformer_conv": "asr",
}
FAMILIES = {"smoke", "llm", "decode", "moe", "asr"}
KNOWN_MODELS = {m.name for m in vars(models).values() if isinstance(m, models.Model)}


def test_suite_has_the_serving_kernels_and_workload_families():
    assert validate_suite(SUITE) == []
    assert set(SERVING) | {"gemm"} <= set(SUITE.names)
    assert set(SUITE.workloads) == FAMILIES


@pytest.mark.parametrize("name", sorted(SERVING))
def test_every_real_case_names_its_model(name):
    spec = SUITE.kernel(name)
    assert SERVING[name] in spec.workloads and "smoke" in spec.workloads
    for workload, cases in spec.workloads.items():
        if workload == "smoke":
            continue
        assert {c["model"] for c in cases} <= KNOWN_MODELS, workload
        for case in cases:
            assert spec.flops(case) > 0
            assert spec.min_bytes(case, 1) > 0


def test_fp8_gemm_smoke_passes_in_fp8(device):
    """fp32 and fp16 smoke cases of every kernel run in test_builtin_suite.py; fp8 here."""
    spec = SUITE.kernel("fp8_block_gemm")
    for params in spec.workloads["smoke"]:
        result = check_case(spec, SUITE.name, "smoke", params, "fp8", device)
        assert result.verdict == "pass", f"{params}: {result.reason}"
        assert result.deterministic is True and result.config is not None


def test_fp8_gemm_writes_bf16_as_the_recipe_says_which_the_interpreter_cannot(device):
    if device.info.kind != "cpu":
        pytest.skip("on a GPU bf16 outputs run")
    spec = SUITE.kernel("fp8_block_gemm")
    case = {**spec.workloads["smoke"][0], "fp8_out": "bf16"}
    result = check_case(spec, SUITE.name, "smoke", case, "fp8", device)
    assert result.verdict == "unsupported" and "bf16" in result.reason
    assert all(c["fp8_out"] == "bf16" for c in spec.workloads["decode"])


def test_fp8_quantisation_writes_e4m3_and_fp32_scales(device):
    spec = SUITE.kernel("fp8_group_quant")
    params = spec.workloads["smoke"][1]
    gen = torch.Generator().manual_seed(0)
    inputs = spec.make_inputs(params, torch.float16, torch.device(device.torch_device), gen)
    outputs = spec.make_outputs(inputs, params)
    spec.launch(inputs, outputs, params, None)
    assert outputs["q"].dtype == torch.float8_e4m3fn and outputs["scales"].dtype == torch.float32
    # Every group's largest magnitude lands on e4m3's largest value.
    q = outputs["q"].float().reshape(params["m"], -1, params["group"])
    assert torch.equal(q.abs().amax(-1), torch.full_like(q[..., 0], 448.0))


@pytest.mark.parametrize("config", DECODE_CONFIGS[1:4], ids=lambda c: f"split{c.meta['SPLIT_K']}")
def test_gemm_decode_splits_agree_with_the_reference(config, device):
    """The autotuner picks among these at decode; each must be right, including splits
    left without any K (K=48 is one 128-wide tile)."""
    gemm = dataclasses.replace(SUITE.kernel("gemm"), pinned_config=config)
    for params in gemm.workloads["smoke"][:2]:
        result = check_case(gemm, SUITE.name, "smoke", params, "fp32", device)
        assert result.verdict == "pass", result.reason


def test_gemm_decode_workload_is_the_dense_models_projections():
    cases = SUITE.kernel("gemm").workloads["decode"]
    llama = [c for c in cases if c["model"] == "llama-3.1-8b" and c["m"] == 1]
    assert {(c["weight"], c["k"], c["n"]) for c in llama} == {
        ("qkv_proj", 4096, (32 + 2 * 8) * 128),
        ("o_proj", 4096, 4096),
        ("gate_up_proj", 4096, 2 * 14336),
        ("down_proj", 14336, 4096),
    }
    assert {c["m"] for c in cases} == set(models.DECODE_TOKENS)


def test_moe_workloads_cover_decode_per_expert_and_prefill():
    spec = SUITE.kernel("fused_moe")
    deepseek = [c for c in spec.workloads["moe"] if c["model"] == "deepseek-v3"]
    assert {c["tokens"] for c in deepseek} == {1, 32, 256, 1024, 2048, 8192}
    case = deepseek[0]
    assert (case["hidden"], case["intermediate"], case["experts"], case["top_k"]) == (
        7168,
        2048,
        256,
        8,
    )
    assert (case["gate"], case["n_group"], case["topk_group"], case["scale"]) == (
        "sigmoid",
        8,
        4,
        2.5,
    )
    decode = spec.workloads["decode"]
    assert max(c["tokens"] * c["top_k"] / c["experts"] for c in decode) <= 64
    assert {c["model"] for c in spec.workloads["moe"]} == {
        "mixtral-8x7b",
        "deepseek-v3",
        "qwen3-30b-a3b",
    }


def test_mla_and_asr_workloads_use_the_published_shapes():
    mla = SUITE.kernel("mla_decode").workloads["decode"]
    assert {(c["heads"], c["kv_lora_rank"], c["qk_rope_head_dim"]) for c in mla} == {(128, 512, 64)}
    asr = SUITE.kernel("conformer_conv").workloads["asr"]
    chunks = {(c["model"], c["frames"]) for c in asr if c["streaming"]}
    # 0.16-1.28 s of 80 ms frames (8x subsampling) and of 40 ms frames (4x)
    assert {f for m, f in chunks if m == "fastconformer-large"} == {2, 4, 8, 16}
    assert {f for m, f in chunks if m == "conformer-large"} == {4, 8, 16, 32}
    assert {c["kernel"] for c in asr} == {9, 31}
    assert any(not c["streaming"] and c["frames"] >= 250 for c in asr)


def test_paged_attention_model_counts():
    spec = SUITE.kernel("paged_decode_attention")
    case = {"batch": 2, "seq_q": 4, "heads_q": 8, "heads_kv": 2, "head_dim": 128,
            "page_size": 16, "seq_k": 100}  # fmt: skip
    assert seq_lens_of(case) == [100, 50]
    # each query i of 4 sees n - 4 + i + 1 keys
    pairs = sum(4 * (n - 4) + 10 for n in (100, 50))
    assert spec.flops(case) == 4 * 8 * 128 * pairs
    pages = math.ceil(100 / 16) + math.ceil(50 / 16)
    q = 2 * 4 * 8 * 128
    assert spec.min_bytes(case, 2) == 2 * (2 * q + 2 * 150 * 2 * 128) + 4 * pages


def test_moe_model_counts():
    spec = SUITE.kernel("fused_moe")
    case = {"tokens": 1, "hidden": 64, "intermediate": 32, "experts": 8, "top_k": 2,
            "gate": "softmax", "renormalize": True}  # fmt: skip
    assert spec.flops(case) == 6 * 1 * 2 * 64 * 32
    # one token touches exactly top_k experts
    assert spec.min_bytes(case, 2) == 2 * (2 * 64 + 8 + 2 * 3 * 64 * 32) + 8 * 2


def test_alignment_groups_slots_by_expert_in_padded_blocks():
    ids = torch.tensor([[2, 0], [2, 1], [0, 2]], dtype=torch.int32)
    sorted_slots, block_expert = align_to_blocks(ids, experts=4, block_m=4)
    blocks = sorted_slots.view(-1, 4).tolist()
    assert blocks[:3] == [[1, 4, 6, 6], [3, 6, 6, 6], [0, 2, 5, 6]]
    assert block_expert.tolist()[:4] == [0, 1, 2, -1]
    assert set(block_expert.tolist()[3:]) == {-1}


def test_group_limited_routing_only_picks_from_the_best_groups():
    logits = torch.randn(32, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    bias = torch.zeros(16, dtype=torch.float64)
    routing = Routing(top_k=4, sigmoid=True, n_group=4, topk_group=2, renormalize=True, scale=2.5)
    ids, weights = route_reference(logits, bias, routing)
    assert all(len({int(e) // 4 for e in row}) <= 2 for row in ids)
    assert torch.allclose(weights.sum(-1), torch.full((32,), 2.5, dtype=torch.float64))


# Run where the build runs, in a process without Triton's interpreter: the build stage
# records launches by standing in for the compiled launcher.
_PLAN = """
import json, sys
from kernelwatch.analysis.static_diff import build_key
from kernelwatch.harness.build.plan import plan_builds
from kernelwatch.kernels import SUITE
jobs, failures, _ = plan_builds(SUITE, sys.argv[1:], "llm", ("fp16",), ("sm_90a",))
keys = [build_key(j.skeleton("builtin")) for j in jobs]
print(json.dumps({"failures": [f.reason for f in failures],
                  "functions": sorted({(j.kernel, j.launch.function) for j in jobs}),
                  "keys": len(keys), "distinct": len(set(keys)),
                  "gemms": sorted({(j.case, j.launch_index) for j in jobs
                                   if j.launch.function == "moe_gemm_kernel"})}))
"""


def test_build_plans_record_every_serving_kernel_on_the_meta_device():
    """The build stage runs launches on the meta device (no data): routing, alignment, paged
    caches and split planning must read none, or a kernel cannot be built without a GPU."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run(
        [sys.executable, "-c", _PLAN, *sorted(SERVING)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    planned = json.loads(run.stdout)
    assert planned["failures"] == []
    # Each build has a key of its own (issue 48): fused MoE launches its grouped GEMM twice
    # in a case (gate/up, then down), two builds told apart by their launch's position.
    assert planned["keys"] == planned["distinct"]
    first_case = planned["gemms"][0][0]
    assert len({index for case, index in planned["gemms"] if case == first_case}) == 2
    assert {tuple(f) for f in planned["functions"]} >= {
        ("fused_moe", "moe_route_kernel"),
        ("fused_moe", "moe_gemm_kernel"),
        ("fp8_block_gemm", "fp8_block_gemm_kernel"),
        ("fp8_group_quant", "group_quant_fp8_kernel"),
        ("paged_decode_attention", "paged_decode_split_kernel"),
        ("paged_decode_attention", "combine_splits_kernel"),
        ("mla_decode", "mla_decode_split_kernel"),
        ("conformer_conv", "glu_causal_dwconv_kernel"),
    }


def test_fp8_kernels_build_in_fp8_by_default():
    assert default_dtypes(SUITE.kernel("fp8_block_gemm")) == ("fp8", "fp16", "bf16")


@pytest.mark.parametrize("name", sorted(SERVING))
def test_baselines_run_every_smoke_case(name):
    """The stock-library baseline is timed beside the kernel: it must take every case and
    give back the kernel's outputs, shapes included."""
    spec = SUITE.kernel(name)
    dtype = torch.float8_e4m3fn if "fp8" in spec.dtypes else torch.float16
    for params in spec.workloads["smoke"]:
        inputs = spec.make_inputs(params, dtype, torch.device("cpu"), torch.Generator())
        expected = spec.make_outputs(inputs, params)
        got = spec.baseline.fn(inputs, params)
        assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in expected.items()}
