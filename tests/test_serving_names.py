"""Issue 44, names matched to kernels: a trace's kernel is the kernelwatch kernel whose build
compiled a function of its name (a Triton jit function, a CUDA C++ entry point, mangled or
not), or a library's kernel matched to the kernel measured against that library; any other
is listed unmatched with its share."""

from __future__ import annotations

import psycopg
import pytest
from factories import CASE, build, measurement, run, run_info
from trace_files import STEP, Kernel, chrome_trace, write_json

from kernelwatch.harness.records import CaseId
from kernelwatch.serving.names import KnownKernel, base_name, library_of, match
from kernelwatch.serving.traces import read_trace
from kernelwatch.store import serving
from kernelwatch.store.ingest import Ingester

KNOWN = (
    KnownKernel("fused_moe", ("fused_moe_kernel",), "torch._grouped_mm (bf16)"),
    KnownKernel("silu_and_mul_cuda", ("silu_and_mul_bf16", "silu_and_mul_f16")),
    KnownKernel("gemm", ("_matmul_kernel",), "torch.matmul (cuBLAS)"),
    KnownKernel(
        "flash_decode",
        ("_ZN5flash24flash_fwd_splitkv_kernelILi128EEEvNS_6ParamsE",),
        "FlashAttention-2",
    ),
    KnownKernel("all_reduce", ("one_shot_all_reduce",), "torch.distributed.all_reduce (NCCL)"),
)


def _kernels(tmp_path):
    return read_trace(write_json(tmp_path / "step.json", chrome_trace())).kernels


def test_triton_cuda_and_library_kernels_match_and_the_rest_is_listed(tmp_path):
    found = {m.trace.short_name: m for m in match(_kernels(tmp_path), KNOWN)}
    assert len(found) == len(STEP)  # nothing dropped
    moe = found["fused_moe_kernel"]
    assert (moe.kernel, moe.role) == ("fused_moe", "kernel")  # a Triton function
    # A C++ kernel built from a mangled entry point: the same base name as the trace's.
    flash = found["flash_fwd_splitkv_kernel"]
    assert (flash.kernel, flash.role) == ("flash_decode", "kernel")
    gemm = found["nvjet_hsh_256x128_64x4_2x1_v_bz_TNN"]
    assert (gemm.kernel, gemm.role, gemm.library) == ("gemm", "baseline", "cuBLAS")
    nccl = found["ncclDevKernel_AllReduce_Sum_bf16_RING_LL128"]
    assert (nccl.kernel, nccl.role, nccl.library) == ("all_reduce", "baseline", "NCCL")
    unknown = found["_rms_norm_fwd_kernel"]
    assert (unknown.kernel, unknown.role) == (None, "")
    assert unknown.trace.share == pytest.approx(2_100 * 65 / sum(k.dur_ns * k.launches
                                                                 for k in STEP))  # fmt: skip


def test_an_extern_c_cuda_entry_matches_its_trace_name(tmp_path):
    silu = Kernel("silu_and_mul_bf16", "silu_and_mul_bf16", "silu_and_mul_bf16", 3_000, 10)
    trace = write_json(tmp_path / "s.json", chrome_trace((silu,)))
    (only,) = match(read_trace(trace).kernels, KNOWN)
    assert (only.kernel, only.role) == ("silu_and_mul_cuda", "kernel")


@pytest.mark.parametrize(
    ("function", "base"),
    [
        ("_ZN4vllm19silu_and_mul_kernelIfEEvPT_PKS1_i", "silu_and_mul_kernel"),
        ("_Z15rms_norm_kernelPfPKfi", "rms_norm_kernel"),
        ("fused_moe_kernel", "fused_moe_kernel"),
        ("void vllm::act_and_mul_kernel<float>(float*, const float*, int)", "act_and_mul_kernel"),
    ],
)
def test_base_names_of_compiled_functions(function, base):
    assert base_name(function) == base


@pytest.mark.parametrize(
    ("name", "library"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_"
         "execute_segment_k_off_kernel__5x_cublas", "cuBLAS"),
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
         "128>>>(flash::FlashAttnFwdSm90<128>::Params)", "FlashAttention"),
        ("triton_poi_fused_add_cos_sin_0", ""),
    ],
)  # fmt: skip
def test_library_kernels_are_known_by_their_names(name, library):
    assert library_of(name) == library


def test_the_store_knows_each_kernels_functions_and_baseline(store_url):
    other = CaseId(**{**CASE.__dict__, "kernel": "softmax"})
    records = [
        build(function="_rms_norm_fwd_kernel"),
        build(function="_rms_norm_fwd_kernel", arch="sm_100a"),
        build(kernel="softmax", function="softmax_kernel"),
        measurement(CASE, baseline="torch.nn.functional.rms_norm"),
        measurement(other),
    ]
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(run(records, run_info()))
        known = serving.known_kernels(conn, run_info().repository)
    assert known == [
        KnownKernel(CASE.kernel, ("_rms_norm_fwd_kernel",), "torch.nn.functional.rms_norm"),
        KnownKernel("softmax", ("softmax_kernel",), ""),
    ]


def test_explain_lists_the_traced_runs_kernels_matched_in_the_repository_it_served(
    kernelwatch_cli, store_url, tmp_path
):
    import json

    from serving_files import vllm_result

    info = run_info()
    gemm = CaseId(**{**CASE.__dict__, "kernel": "gemm"})
    moe = CaseId(**{**CASE.__dict__, "kernel": "fused_moe"})
    records = [
        build(kernel="fused_moe", function="fused_moe_kernel"),
        build(kernel="gemm", function="_matmul_kernel"),
        measurement(gemm, baseline="torch.matmul (cuBLAS)"),
        measurement(moe),
    ]
    with psycopg.connect(store_url) as conn:
        Ingester(conn).ingest(run(records, info))
    result = tmp_path / "result.json"
    result.write_text(json.dumps(vllm_result(metadata={
        "deployment": "moe-chat", "gpu": "H200", "tp": "1", "kernel_commit": info.commit.sha,
    })))  # fmt: skip
    trace = write_json(tmp_path / "step.json", chrome_trace())
    env = {"KERNELWATCH_DATABASE_URL": store_url}
    ingested = kernelwatch_cli("serving", "ingest", str(result), "--trace", str(trace), env=env)
    assert ingested.returncode == 0, ingested.stderr

    shown = kernelwatch_cli("serving", "explain", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    rows = {r["short_name"]: r for r in map(json.loads, shown.stdout.splitlines())}
    assert set(rows) == {k.short for k in STEP}
    assert (rows["fused_moe_kernel"]["matched"], rows["fused_moe_kernel"]["role"]) == (
        "fused_moe",
        "kernel",
    )
    nvjet = rows["nvjet_hsh_256x128_64x4_2x1_v_bz_TNN"]
    assert (nvjet["matched"], nvjet["role"], nvjet["library"]) == ("gemm", "baseline", "cuBLAS")
    assert rows["_rms_norm_fwd_kernel"]["matched"] is None
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)

    table = kernelwatch_cli("serving", "explain", env=env)
    assert table.returncode == 0, table.stderr
    assert f"in {info.repository}; unmatched" in table.stdout
    assert "gemm (its baseline, cuBLAS)" in table.stdout

    none = kernelwatch_cli("serving", "explain", "999", env=env)
    assert none.returncode == 2 and none.stderr.startswith("error: run 999 has no trace")
