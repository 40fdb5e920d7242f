"""Issue 44, traces in: torch.profiler's Chrome trace and Nsight Systems' SQLite export of
one decode step (built from the formats' documented fields) read into each kernel's share
of the step's GPU time, the same from either tool; a CPU-only profile and a damaged file are
one line each."""

from __future__ import annotations

import gzip
import json
import sqlite3

import psycopg
import pytest
from trace_files import FLASH, STEP, chrome_trace, cpu_only_trace, nsys_sqlite, write_json

from kernelwatch.serving.traces import (
    NSYS_SQLITE,
    TORCH_PROFILER,
    TraceError,
    TraceProfile,
    read_trace,
    short_name,
)

TOTAL_NS = sum(k.dur_ns * k.launches for k in STEP)


def test_both_tools_give_the_same_kernels_launches_and_shares(tmp_path):
    chrome = read_trace(write_json(tmp_path / "step.pt.trace.json", chrome_trace()))
    nsys = read_trace(nsys_sqlite(tmp_path / "step.sqlite"))
    assert (chrome.source, nsys.source) == (TORCH_PROFILER, NSYS_SQLITE)
    assert chrome.device == "NVIDIA H200"
    assert chrome.gpu_ns == nsys.gpu_ns == TOTAL_NS  # the memcpy is not a kernel
    assert [(k.short_name, k.launches, k.gpu_ns) for k in chrome.kernels] == [
        (k.short_name, k.launches, k.gpu_ns) for k in nsys.kernels
    ]
    assert [k.name for k in chrome.kernels] == [k.name for k in nsys.kernels]
    for kernel in STEP:
        (mine,) = [k for k in chrome.kernels if k.short_name == kernel.short]
        assert mine.share == pytest.approx(kernel.dur_ns * kernel.launches / TOTAL_NS, rel=1e-9)
    assert sum(k.share for k in nsys.kernels) == pytest.approx(1.0)
    # Most GPU time first: the MoE kernel, the cuBLAS GEMMs, then attention.
    assert [k.short_name for k in chrome.kernels[:3]] == [
        "fused_moe_kernel",
        "nvjet_hsh_256x128_64x4_2x1_v_bz_TNN",
        FLASH,
    ]


def test_a_gzipped_trace_is_the_same_trace(tmp_path):
    text = json.dumps(chrome_trace()).encode()
    (tmp_path / "a.json").write_bytes(text)
    (tmp_path / "a.json.gz").write_bytes(gzip.compress(text))
    plain, packed = (read_trace(tmp_path / n) for n in ("a.json", "a.json.gz"))
    assert plain.kernels == packed.kernels and plain.digest != packed.digest


def test_the_profile_has_a_versioned_json_form(tmp_path):
    profile = read_trace(nsys_sqlite(tmp_path / "step.sqlite"))
    assert TraceProfile.from_json(json.loads(profile.dumps())) == profile


@pytest.mark.parametrize(
    ("name", "short"),
    [(k.kineto, k.short) for k in STEP]
    + [
        ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<"
         "128>>>(flash::FlashAttnFwdSm90<128>::Params)", "device_kernel"),
        ("triton_poi_fused_add_cos_sin_0", "triton_poi_fused_add_cos_sin_0"),
        ("void at::native::(anonymous namespace)::elementwise_kernel<128, 4>(int)",
         "elementwise_kernel"),
    ],
)  # fmt: skip
def test_short_names_are_those_nsys_records(name, short):
    assert short_name(name) == short


def test_a_cpu_only_profile_says_so_in_one_line(tmp_path):
    for path in (
        write_json(tmp_path / "cpu.json", cpu_only_trace()),
        nsys_sqlite(tmp_path / "cpu.sqlite", with_kernels=False),
    ):
        with pytest.raises(TraceError) as caught:
            read_trace(path)
        message = str(caught.value)
        assert "no GPU kernel events (a CPU-only profile)" in message and "\n" not in message
        assert message.startswith(str(path))


def test_damaged_and_foreign_files_are_one_line_each(tmp_path):
    whole = json.dumps(chrome_trace())
    kernel = next(e for e in chrome_trace()["traceEvents"] if e.get("cat") == "kernel")
    cases = {
        "truncated.json": (whole[: len(whole) // 2], "not JSON"),
        "result.json": (json.dumps({"date": "20261201-020000", "backend": "vllm"}),
                        "no traceEvents list"),
        "negative.json": (json.dumps({"traceEvents": [{**kernel, "dur": -3.0}]}),
                          "bad duration"),
        "gz.json.gz": ("\x1f\x8bnot really gzip", "gzip"),
    }  # fmt: skip
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_bytes(text.encode("latin-1"))
        with pytest.raises(TraceError, match=expected):
            read_trace(path)
    broken = nsys_sqlite(tmp_path / "broken.sqlite")
    with sqlite3.connect(broken) as conn:
        conn.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1 WHERE rowid = 1')
    with pytest.raises(TraceError, match="end before they start"):
        read_trace(broken)
    with pytest.raises(TraceError, match="cannot read it"):
        read_trace(tmp_path / "missing.json")


def test_a_runs_trace_is_stored_once_and_read_back(tmp_path, store_url):
    from serving_files import vllm_result

    from kernelwatch.serving.formats import Given, read_text
    from kernelwatch.store import serving

    (run,) = read_text(json.dumps(vllm_result()), "r.json", Given(), "2026-12-01T00:00:00+00:00")
    profile = read_trace(nsys_sqlite(tmp_path / "step.sqlite"))
    with psycopg.connect(store_url) as conn:
        pk = serving.ingest(conn, run).run_pk
        assert serving.trace(conn, pk) is None
        first, again = (serving.ingest_trace(conn, pk, profile) for _ in range(2))
        assert first[1] and not again[1] and first[0] == again[0]
        back = serving.trace(conn, pk)
        assert back is not None and back.kernels == profile.kernels and back == profile
