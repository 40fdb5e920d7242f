"""The static regression rules, as pure functions over build records."""

from __future__ import annotations

from dataclasses import replace

from kernelwatch.analysis.static_diff import compare, diff_builds, resident_blocks
from kernelwatch.analysis.thresholds import KernelOverride, StaticThresholds, Thresholds
from kernelwatch.harness.build.archs import ARCHS
from kernelwatch.harness.records import BuildMetrics, LaunchConfig

BASE = BuildMetrics(
    suite="builtin",
    kernel="gemm",
    function="gemm_kernel",
    language="triton",
    arch="sm_90a",
    config=LaunchConfig({"BLOCK_M": 128, "BLOCK_N": 128}, 8, 3),
    status="ok",
    registers=120,
    spill_store_bytes=0,
    spill_load_bytes=0,
    shared_static_bytes=1024,
    shared_dynamic_bytes=98304,
    num_warps=8,
    num_stages=3,
    tensor_core="HGMMA",
    global_load_bits=128,
    instructions=1000,
    dtype="fp16",
    workload="llm",
    case="m=16 n=4096 k=4096",
)
#: The most instructions BASE may grow to without a finding, at the default threshold.
AT_LIMIT = round(BASE.instructions * (1 + StaticThresholds().max_instruction_growth))


def rules(after: BuildMetrics, before: BuildMetrics = BASE) -> dict[str, tuple[str, str]]:
    return {f.rule: (f.before, f.after) for f in compare(before, after)}


#: Fused MoE's two grouped GEMMs in one case: one function launched twice, each compiled
#: to its own specialisation (issue 48).
GATE_UP = replace(BASE, kernel="fused_moe", function="moe_gemm_kernel", registers=168)
DOWN = replace(GATE_UP, registers=96, launch_index=1, cubin_sha256="down")


def test_two_launches_of_one_function_are_each_compared_with_their_own():
    # Unchanged: each launch against itself (keyed alike, the gate/up GEMM was compared
    # with the down one and read as an occupancy loss).
    assert diff_builds([GATE_UP, DOWN], [GATE_UP, DOWN]) == []
    # Only the second launch spills: one finding, the second launch's.
    spilling = replace(DOWN, spill_store_bytes=64, spill_load_bytes=64)
    (finding,) = diff_builds([GATE_UP, DOWN], [GATE_UP, spilling])
    assert (finding.rule, finding.before) == ("spills", "0 B stores / 0 B loads")
    assert finding.message == "starts spilling (registers 96 -> 96) (launch 2)"


def test_unchanged_build_has_no_findings():
    assert compare(BASE, replace(BASE, cubin_sha256="other", instructions=AT_LIMIT)) == []


def test_new_spills():
    after = replace(BASE, spill_store_bytes=7060, spill_load_bytes=10260)
    assert rules(after)["spills"] == ("0 B stores / 0 B loads", "7060 B stores / 10260 B loads")
    [finding] = compare(BASE, after)
    assert finding.message == "starts spilling (registers 120 -> 120)"


def test_more_spills_are_flagged_and_fewer_or_equal_are_not():
    spilling = replace(BASE, spill_store_bytes=256, spill_load_bytes=512)
    more = rules(replace(BASE, spill_store_bytes=512, spill_load_bytes=512), spilling)
    assert more["spills"] == ("256 B stores / 512 B loads", "512 B stores / 512 B loads")
    [finding] = compare(spilling, replace(spilling, spill_load_bytes=1024))
    assert finding.message.startswith("spills more")
    assert "spills" not in rules(spilling, spilling)
    fewer = replace(BASE, spill_store_bytes=128, spill_load_bytes=256)
    assert "spills" not in rules(fewer, spilling)
    assert "spills" not in rules(BASE, spilling)


def test_new_spill_loads_alone_are_flagged():
    found = rules(replace(BASE, spill_load_bytes=64))
    assert found["spills"] == ("0 B stores / 0 B loads", "0 B stores / 64 B loads")


def test_tensor_core_downgrade_but_not_upgrade():
    assert rules(replace(BASE, tensor_core="HMMA"))["tensor_core"] == ("HGMMA", "HMMA")
    assert rules(replace(BASE, tensor_core="none"))["tensor_core"] == ("HGMMA", "none")
    assert "tensor_core" not in rules(replace(BASE, tensor_core="tcgen05"))


def test_occupancy_cliff():
    sm90 = ARCHS["sm_90a"]
    # 8 warps: 128 registers fit two blocks in 64K registers, 136 only one.
    assert resident_blocks(128, 8, sm90) == 2
    assert resident_blocks(136, 8, sm90) == 1
    assert resident_blocks(16, 1, sm90) == 32  # the block limit
    assert resident_blocks(16, 3, sm90) == 21  # the warp limit: whole blocks of 3 warps
    assert resident_blocks(65, 1, sm90) == 28  # 65 registers are granted as 72
    assert rules(replace(BASE, registers=136))["occupancy"] == ("120 regs", "136 regs")
    assert "occupancy" not in rules(replace(BASE, registers=127))


def test_shared_memory_over_the_limit():
    found = rules(replace(BASE, shared_dynamic_bytes=240 * 1024))
    assert found["shared_memory"] == ("99328 B", f"{1024 + 240 * 1024} B")
    over = replace(BASE, shared_dynamic_bytes=240 * 1024)
    assert "shared_memory" not in rules(replace(over, shared_dynamic_bytes=250 * 1024), over)
    # No static shared memory recorded counts as none: one byte over the limit is over.
    limit = ARCHS["sm_90a"].shared_limit_bytes
    dynamic_only = replace(BASE, shared_static_bytes=None, shared_dynamic_bytes=limit + 1)
    assert rules(dynamic_only)["shared_memory"] == ("99328 B", f"{limit + 1} B")
    # Exactly at the limit fits; static and dynamic add up; no dynamic size counts as none.
    at_limit = replace(BASE, shared_static_bytes=limit, shared_dynamic_bytes=None)
    assert "shared_memory" not in rules(at_limit)
    assert "shared_memory" in rules(replace(at_limit, shared_dynamic_bytes=1), at_limit)
    halves = replace(BASE, shared_static_bytes=limit // 2, shared_dynamic_bytes=limit // 2 + 8)
    assert "shared_memory" in rules(halves)
    assert "shared_memory" in rules(replace(at_limit, shared_static_bytes=limit + 1))


def test_instruction_growth_threshold():
    grown = replace(BASE, instructions=AT_LIMIT + 1)
    assert rules(grown)["instructions"] == ("1000", str(AT_LIMIT + 1))
    [finding] = compare(BASE, replace(BASE, instructions=1250))
    assert finding.message == "+25% instructions (threshold 10%)"
    [finding] = compare(BASE, replace(BASE, instructions=3000))
    assert finding.message == "+200% instructions (threshold 10%)"
    # No count at the base (not recorded): nothing to grow from.
    assert compare(replace(BASE, instructions=None), BASE) == []
    assert compare(BASE, grown, StaticThresholds(max_instruction_growth=0.5)) == []
    assert compare(BASE, replace(BASE, instructions=AT_LIMIT)) == []


def test_a_per_kernel_override_sets_that_kernels_instruction_limit():
    loose = {"static": {"max_instruction_growth": 0.5}}
    thresholds = Thresholds(overrides=(KernelOverride(("ge*",), loose),))
    grown = replace(BASE, instructions=1300)
    assert diff_builds([BASE], [grown], thresholds) == []
    softmax = replace(BASE, kernel="softmax")
    found = diff_builds([softmax], [replace(grown, kernel="softmax")], thresholds)
    assert [f.rule for f in found] == ["instructions"]


def test_narrower_loads():
    assert rules(replace(BASE, global_load_bits=32))["load_width"] == ("128-bit", "32-bit")


def test_improvements_and_unknowns_are_no_findings():
    narrow = replace(BASE, global_load_bits=64, registers=136)
    assert compare(narrow, BASE) == []  # wider loads, more resident blocks
    assert compare(replace(BASE, global_load_bits=None), BASE) == []  # width unknown before
    # Registers unknown at the base: no occupancy to compare with.
    assert "occupancy" not in rules(replace(BASE, registers=136), replace(BASE, registers=None))


def test_new_spill_stores_count_when_loads_are_unknown():
    found = rules(replace(BASE, spill_store_bytes=1, spill_load_bytes=None))
    assert found["spills"] == ("0 B stores / 0 B loads", "1 B stores / 0 B loads")


def test_statuses_compare_by_value():
    # Statuses read back from JSON or the store are equal strings, not the same object.
    ok = replace(BASE, status="".join(["o", "k"]))
    assert [f.rule for f in compare(ok, replace(ok, global_load_bits=32))] == ["load_width"]
    assert diff_builds([BASE], [replace(ok, config=LaunchConfig({"BLOCK_M": 64}, 4, 3))]) == []
    unrecorded = BuildMetrics(
        "builtin", "gemm", "", "triton", "sm_90a", None, "error", "meta", dtype=ok.dtype
    )
    assert [f.rule for f in diff_builds([ok], [unrecorded])] == ["no_longer_compiles"]


def test_no_longer_compiles_matched_and_unrecorded():
    broken = replace(BASE, status="error", reason="does not compile for sm_90a: boom")
    findings = diff_builds([BASE], [broken])
    assert [(f.rule, f.kernel, f.arch, f.config, f.before, f.after) for f in findings] == [
        ("no_longer_compiles", "gemm", "sm_90a", "BLOCK_M=128,BLOCK_N=128,w8,s3", "ok", "error")
    ]
    # Launches that could not be recorded at all (the plan's error for that kernel, dtype
    # and target): that error stands in, with its reason.
    unrecorded = BuildMetrics(
        "builtin", "gemm", "", "triton", "sm_90a", None, "error", "meta", dtype="fp16"
    )
    (lost,) = diff_builds([BASE], [unrecorded])
    assert (lost.rule, lost.config, lost.message) == (
        "no_longer_compiles",
        "BLOCK_M=128,BLOCK_N=128,w8,s3",
        "meta",
    )


def test_another_builds_error_is_not_blamed_on_a_build_that_compiled():
    """Issue 18: a head error of the same kernel and target was blamed, with its reason, on
    every base build missing at head."""
    other_case = replace(BASE, case="m=1 n=4096 k=4096", status="error", reason="ptxas: boom")
    assert diff_builds([BASE], [replace(BASE, case="m=8 n=8 k=8"), other_case]) == []
    other_dtype = replace(BASE, function="", dtype="bf16", status="error", reason="meta")
    assert diff_builds([BASE], [other_dtype]) == []


def test_a_config_change_is_compared_like_any_change():
    """Issue 18: the config label was part of the match key, so a commit that changed a
    kernel's block size or warps was never compared, and a huge block size went unflagged."""
    huge = replace(
        BASE,
        config=LaunchConfig({"BLOCK_M": 1024, "BLOCK_N": 128}, 8, 3),
        registers=255,
        spill_store_bytes=4096,
        spill_load_bytes=4096,
    )
    found = {f.rule: f for f in diff_builds([BASE], [huge])}
    assert set(found) == {"spills", "occupancy"}
    assert found["spills"].config == "BLOCK_M=1024,BLOCK_N=128,w8,s3"
    assert found["spills"].message.endswith(
        "(config BLOCK_M=128,BLOCK_N=128,w8,s3 -> BLOCK_M=1024,BLOCK_N=128,w8,s3)"
    )
    # Several configs of one autotuned kernel: each pairs with its own; a config that is
    # only at head, among several, is new.
    small = replace(BASE, config=LaunchConfig({"BLOCK_M": 64, "BLOCK_N": 64}, 4, 3))
    assert diff_builds([BASE, small], [BASE, small, huge]) == []
    broken = replace(huge, status="error", reason="does not compile for sm_90a: too big")
    (lost,) = diff_builds([BASE], [broken])
    assert (lost.rule, lost.after) == ("no_longer_compiles", "error")
    assert lost.message.startswith("does not compile for sm_90a: too big")


def test_removed_or_new_builds_are_not_regressions():
    other = replace(BASE, kernel="softmax")
    assert diff_builds([BASE], [other]) == []
    # The same kernel and arch built with another config: the old config was dropped.
    retuned = replace(BASE, config=LaunchConfig({"BLOCK_M": 64, "BLOCK_N": 128}, 4, 3))
    assert diff_builds([BASE], [retuned]) == []
    assert diff_builds([], [BASE]) == []
    # A build that already failed at the base cannot regress.
    failed = replace(BASE, status="error")
    assert diff_builds([failed], [failed]) == []
    unrecorded = BuildMetrics("builtin", "gemm", "", "triton", "sm_90a", None, "error", "meta")
    assert diff_builds([failed], [unrecorded]) == []
