"""The correctness harness catches each planted failure, in-process, and says which."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from planted.broken_suite import launch_scale

from kernelwatch.harness.correctness import (
    SENTINEL,
    Comparison,
    case_seed,
    check_case,
    compare,
    poisons,
)
from kernelwatch.harness.records import CaseId, LaunchConfig
from kernelwatch.harness.spec import KernelSpec, Suite
from kernelwatch.harness.suite import SuiteRef, load_suite


@pytest.fixture(scope="module")
def planted(planted_suite_path) -> Suite:
    return load_suite(SuiteRef(str(planted_suite_path)))


def _check(suite: Suite, name: str, device, dtype: str = "fp32"):
    spec = suite.kernel(name)
    return check_case(spec, suite.name, "smoke", spec.workloads["smoke"][0], dtype, device)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_good_kernel_passes(planted, device, dtype):
    result = _check(planted, "good", device, dtype)
    assert result.verdict == "pass", result.reason
    assert result.rel_error is not None and result.rel_error < result.tolerance
    assert result.deterministic is True
    assert result.config is not None and result.config.meta == {"BLOCK": 32}


@pytest.mark.parametrize(
    ("kernel", "verdict", "fragment"),
    [
        ("wrong_result", "fail", "relative error"),
        ("unwritten_tail", "fail", "3 of 70 elements of 'y' never written (first at index (67,))"),
        ("nan_output", "fail", "1 of 70 elements of 'y' are NaN/Inf"),
        ("nondeterministic", "fail", "nondeterministic"),
        ("raises", "error", "RuntimeError: planted: the kernel raised"),
    ],
)
def test_planted_failures_are_caught(planted, device, kernel, verdict, fragment):
    result = _check(planted, kernel, device)
    assert result.verdict == verdict
    assert fragment in result.reason


def test_a_nondeterministic_kernel_is_recorded_as_such(planted, device):
    assert _check(planted, "nondeterministic", device).deterministic is False
    assert _check(planted, "good", device).deterministic is True


def test_unwritten_and_nan_are_told_apart(planted, device):
    tail = _check(planted, "unwritten_tail", device)
    nan = _check(planted, "nan_output", device)
    assert (tail.unwritten, tail.nonfinite) == (3, 0)
    assert (nan.unwritten, nan.nonfinite) == (0, 1)
    assert tail.rel_error is None and nan.rel_error is None
    assert tail.deterministic is None  # holes are not compared between launches


def test_error_keeps_the_traceback(planted, device):
    result = _check(planted, "raises", device)
    assert "Traceback" in result.detail and "_raises" in result.detail


@pytest.mark.parametrize("n", [2, 8])
def test_constant_inputs_are_rejected(planted, device, n):
    good = planted.kernel("good")
    constant = KernelSpec(
        **{
            **good.__dict__,
            "name": "constant",
            "make_inputs": lambda p, dtype, dev, gen: {"x": torch.ones(n, dtype=dtype)},
        }
    )
    result = check_case(constant, "planted", "smoke", {"n": 8}, "fp32", device)
    assert result.verdict == "error"
    assert "constant tensor 'x'" in result.reason


def _forgets_its_scratch_tail(t, o, p, cfg):
    """Computes through a scratch buffer of its own and forgets the scratch's last element.
    The same computation ran into a buffer of the same size just before, so the allocator
    hands that memory back holding the right value for the forgotten element."""
    x = t["x"]
    earlier = torch.empty_like(x)
    launch_scale(x, earlier, 2.0)
    del earlier
    scratch = torch.empty_like(x)
    config = launch_scale(x, scratch, 2.0, 1)
    o["y"].copy_(scratch)
    return config


def test_a_scratch_element_never_written_is_caught_whatever_the_allocator_hands_back(
    planted, device
):
    stale = KernelSpec(
        **{**planted.kernel("good").__dict__, "name": "stale", "launch": _forgets_its_scratch_tail}
    )
    result = check_case(stale, "planted", "smoke", {"n": 70}, "fp32", device)
    assert result.verdict == "fail"
    assert "1 of 70 elements of 'y' are NaN/Inf" in result.reason
    # The check leaves the process's own setting as it found it.
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_check_loads_neither_inductor_nor_dynamo(planted_suite_path):
    """Each check runs in a fresh child: importing Inductor and Dynamo to set deterministic
    mode cost every one of them 2.3 s of CPU (docs/TESTING.md). A fresh process checks the
    good kernel and lists what it loaded."""
    probe = textwrap.dedent(
        f"""
        import sys
        from kernelwatch.harness.device import select_device
        from kernelwatch.harness.correctness import check_case
        from kernelwatch.harness.suite import SuiteRef, load_suite
        device = select_device()
        spec = load_suite(SuiteRef({str(planted_suite_path)!r})).kernel("good")
        result = check_case(spec, "planted", "smoke", {{"n": 70}}, "fp32", device)
        print(result.verdict, sorted({{"torch._inductor", "torch._dynamo"}} & set(sys.modules)))
        """
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["pass", "[]"]


def test_mismatched_output_names_are_an_error(planted, device):
    good = planted.kernel("good")
    renamed = KernelSpec(**{**good.__dict__, "reference": lambda t, p: {"out": 2 * t["x"]}})
    result = check_case(renamed, "planted", "smoke", {"n": 70}, "fp32", device)
    assert result.verdict == "error"
    assert "make the output names match" in result.reason


def test_a_spec_with_nothing_to_compare_is_an_error_not_a_pass(planted, device):
    good = planted.kernel("good")
    empty = KernelSpec(
        **{
            **good.__dict__,
            "make_outputs": lambda t, p: {},
            "launch": lambda t, o, p, cfg: LaunchConfig({"BLOCK": 32}),
            "reference": lambda t, p: {},
        }
    )
    result = check_case(empty, "planted", "smoke", {"n": 70}, "fp32", device)
    assert result.verdict == "error"
    assert "returns no outputs" in result.reason


def test_bf16_is_unsupported_on_the_interpreter(planted, device):
    if device.info.kind != "cpu":
        pytest.skip("the interpreter gap only exists on the CPU")
    good = planted.kernel("good")
    result = check_case(good, "planted", "smoke", {"n": 70}, "bf16", device)
    assert result.verdict == "unsupported"
    assert "interpreter" in result.reason and "bf16" in result.reason


def test_compare_counts_differences_bitwise():
    ref = {"y": torch.arange(1.0, 5.0, dtype=torch.float64)}
    first = {"y": torch.tensor([1.0, 2.0, 3.0, 4.0])}
    second = {
        "y": torch.tensor([1.0, 2.0, 3.0, torch.nextafter(torch.tensor(4.0), torch.tensor(5.0))])
    }
    result = compare(first, second, ref, tolerance=1e-5)
    assert result.differing == 1
    assert result.rel_error == 0.0
    assert result.failures == (
        "nondeterministic: two launches on the same inputs differ in 1 elements of 'y'",
    )
    assert compare(first, second, ref, 1e-5, expect_deterministic=False).failures == ()


def test_compare_zero_reference_uses_absolute_error():
    ref = {"y": torch.zeros(3, dtype=torch.float64)}
    out = {"y": torch.tensor([0.0, 1e-3, 0.0])}
    result = compare(out, out, ref, tolerance=1e-5)
    assert result.rel_error == pytest.approx(1e-3)
    assert "relative error" in result.failures[0]


def test_sentinel_is_exact_in_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        assert float(torch.tensor(SENTINEL, dtype=dtype)) == SENTINEL


def test_case_seeds_differ_per_case_and_repeat_per_seed():
    a = CaseId("s", "k", "smoke", {"n": 1}, "fp32")
    b = CaseId("s", "k", "smoke", {"n": 2}, "fp32")
    assert case_seed(0, a) == case_seed(0, a)
    assert len({case_seed(0, a), case_seed(0, b), case_seed(1, a)}) == 3


def test_a_case_seed_is_the_same_on_every_version():
    # A stored result names its run seed; reproducing its inputs later, on a newer
    # kernelwatch, needs the same per-case seed: a non-negative 63-bit integer.
    case = CaseId("builtin", "gemm", "smoke", {"m": 64, "n": 64, "k": 64}, "fp16")
    assert case_seed(0, case) == 4778208440657926647
    assert case_seed(1, case) == 1409157300042061856  # its hash's top bit cleared


def _launches(first: list[float], second: list[float], dtype=torch.float32):
    return {"y": torch.tensor(first, dtype=dtype)}, {"y": torch.tensor(second, dtype=dtype)}


def test_a_nan_the_kernel_computed_is_not_a_hole_whatever_the_second_launch_holds():
    # Launch one wrote NaN at elements 1 and 2; launch two wrote real values there, 0.0 and
    # one below the sentinel. Only an element holding both poisons was never written.
    first, second = _launches([1.0, float("nan"), float("nan"), 4.0], [1.0, 0.0, -1e4, 4.0])
    ref = {"y": torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)}
    result = compare(first, second, ref, tolerance=1e-5)
    assert (result.nonfinite, result.unwritten) == (2, 0)
    assert result.failures == ("2 of 4 elements of 'y' are NaN/Inf",)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16])
def test_integer_outputs_must_match_exactly_and_their_holes_are_found(dtype):
    ref = {"y": torch.arange(8, dtype=torch.float64)}
    exact = {"y": torch.arange(8, dtype=dtype)}
    assert compare(exact, exact, ref, tolerance=0.5).failures == ()
    off = torch.arange(8, dtype=dtype)
    off[2] += 1
    off[5] -= 1
    result = compare({"y": off}, {"y": off.clone()}, ref, tolerance=0.5)
    assert result.failures == (
        "2 of 8 elements of 'y' differ from the reference (first at index (2,)); "
        "integer outputs must match exactly",
    )
    unwritten_first, unwritten_second = (p.item() for p in poisons(dtype))
    first, second = torch.arange(8, dtype=dtype), torch.arange(8, dtype=dtype)
    first[6:], second[6:] = unwritten_first, unwritten_second
    holes = compare({"y": first}, {"y": second}, ref, tolerance=0.5)
    assert (holes.unwritten, holes.nonfinite) == (2, 0)
    # A value the kernel wrote in both launches is no hole, even one equal to a poison.
    written = torch.full((8,), unwritten_second, dtype=dtype)
    ref_written = {"y": written.to(torch.float64)}
    assert compare({"y": written}, {"y": written.clone()}, ref_written, 0.5).unwritten == 0
    assert holes.failures[0].startswith(
        "2 of 8 elements of 'y' never written (first at index (6,))"
    )


def test_launches_are_compared_bit_for_bit_so_a_sign_of_zero_counts():
    # -0.0 == 0.0 as numbers; a kernel whose reduction order changes the sign of a zero is
    # still not deterministic.
    first, second = _launches([1.0, -0.0, 0.0], [1.0, 0.0, -0.0])
    ref = {"y": torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)}
    assert compare(first, second, ref, tolerance=1e-5).differing == 2


def test_fp8_outputs_are_compared_through_fp32():
    ref = {"y": torch.tensor([0.5, -1.0, 448.0, 2.0], dtype=torch.float64)}
    out = {"y": ref["y"].to(torch.float8_e4m3fn)}
    result = compare(out, {"y": out["y"].clone()}, ref, tolerance=1e-3)
    assert (result.rel_error, result.failures, result.differing) == (0.0, (), 0)
    nan = out["y"].clone()
    nan[1] = float("nan")
    assert compare({"y": nan}, {"y": nan.clone()}, ref, 1e-3).nonfinite == 1


def test_fp64_outputs_keep_their_precision():
    ref = {"y": torch.tensor([1.0 + 1e-12, 3.0], dtype=torch.float64)}
    result = compare(ref, {"y": ref["y"].clone()}, ref, tolerance=1e-14)
    assert (result.rel_error, result.max_abs_error, result.failures) == (0.0, 0.0, ())


def test_the_errors_are_reported_as_measured():
    ref = {"y": torch.tensor([1.0, 2.0], dtype=torch.float64)}
    out = {"y": torch.tensor([1.0, 2.25])}
    result = compare(out, out, ref, tolerance=1.0)
    assert result.max_abs_error == 0.25
    assert result.rel_error == pytest.approx(0.25 / 5**0.5)  # ||out - ref|| / ||ref||
    # Relative to a reference of any size, and an error exactly at the tolerance passes.
    small = {"y": torch.tensor([0.125, 0.25], dtype=torch.float64)}
    off = {"y": torch.tensor([0.125, 0.28125])}
    at_edge = compare(off, off, small, tolerance=0.03125 / float(small["y"].norm()))
    assert at_edge.rel_error == pytest.approx(0.03125 / 0.125 / 5**0.5)
    assert at_edge.failures == ()


def test_an_empty_output_agrees_with_an_empty_reference():
    # A MoE expert that received no tokens has a (0, hidden) output.
    empty = {"y": torch.empty(0, 4)}
    result = compare(empty, empty, {"y": torch.empty(0, 4, dtype=torch.float64)}, 1e-5)
    assert (result.rel_error, result.max_abs_error, result.failures) == (0.0, 0.0, ())


def test_every_output_is_judged_when_an_earlier_one_has_nan():
    ref = {"a": torch.ones(2, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64)}
    first = {"a": torch.tensor([1.0, float("nan")]), "b": torch.tensor([1.0, 5.0])}
    result = compare(first, {k: v.clone() for k, v in first.items()}, ref, tolerance=1e-5)
    assert len(result.failures) == 2
    assert "'b' relative error" in result.failures[1]


@pytest.mark.parametrize("out_shape", [(4,), (2,), (3, 1)])
def test_an_output_of_another_shape_than_the_reference_is_refused(out_shape):
    out = {"y": torch.zeros(out_shape)}
    with pytest.raises(ValueError, match=r"output 'y' has shape .*, reference has \(3,\)"):
        compare(out, out, {"y": torch.zeros(3, dtype=torch.float64)}, 1e-5)


def test_the_reference_sees_float64_and_scalars_and_integer_inputs_pass_the_random_check(
    planted, device
):
    # One-element floats (a scale) and constant integer tensors (offsets, all zero at
    # first) are legitimate inputs; only a constant float tensor is refused.
    good = planted.kernel("good")
    seen = {}

    def make_inputs(p, dtype, dev, gen):
        return {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype),
            "scale": torch.tensor([2.0], dtype=dtype),
            "offsets": torch.zeros(4, dtype=torch.int64),
            "no_tokens": torch.empty(0, dtype=dtype),
            # Sorted: its first element is its smallest, and it is not constant.
            "positions": torch.sort(torch.randn(6, generator=gen, device=dev)).values.to(dtype),
            "n": int(p["n"]),
        }

    def reference(t, p):
        seen.update({name: getattr(v, "dtype", type(v)) for name, v in t.items()})
        return {"y": t["scale"] * t["x"]}

    spec = KernelSpec(**{**good.__dict__, "make_inputs": make_inputs, "reference": reference})
    result = check_case(spec, "planted", "smoke", {"n": 70}, "fp16", device)
    assert result.verdict == "pass", result.reason
    assert seen == {
        "x": torch.float64,
        "scale": torch.float64,
        "offsets": torch.int64,
        "no_tokens": torch.float64,
        "positions": torch.float64,
        "n": int,
    }


def _echo_config(t, o, p, cfg):
    launch_scale(t["x"], o["y"], 2.0)
    return cfg or LaunchConfig({"BLOCK": 32})


@pytest.mark.parametrize(
    ("pin", "can_autotune", "verified"),
    [
        (LaunchConfig({"BLOCK": 16}), False, LaunchConfig({"BLOCK": 16})),
        (LaunchConfig({"BLOCK": 16}), True, LaunchConfig({"BLOCK": 16})),
        (None, False, LaunchConfig({"BLOCK": 8})),
        (None, True, LaunchConfig({"BLOCK": 32})),
    ],
)
def test_the_config_verified_is_the_pin_else_the_kernels_own_or_its_fixed_one(
    planted, device, pin, can_autotune, verified
):
    # A pin file's config is verified whatever the device; without one, a device that
    # can autotune lets the kernel choose and one that cannot runs the spec's fixed config.
    spec = KernelSpec(
        **{
            **planted.kernel("good").__dict__,
            "launch": _echo_config,
            "pinned_config": LaunchConfig({"BLOCK": 8}),
        }
    )
    tuned = dataclasses.replace(device, can_autotune=can_autotune)
    result = check_case(spec, "planted", "smoke", {"n": 70}, "fp32", tuned, pin=pin)
    assert result.verdict == "pass", result.reason
    assert result.config == verified


def _raises_at_length(t, o, p, cfg):
    raise RuntimeError("first line of the failure " + "y" * 600 + "\n" + "x" * 10_000)


def test_an_error_keeps_500_characters_of_its_first_line_and_the_end_of_its_traceback(
    planted, device
):
    spec = KernelSpec(**{**planted.kernel("good").__dict__, "launch": _raises_at_length})
    result = check_case(spec, "planted", "smoke", {"n": 70}, "fp32", device)
    assert result.reason == ("RuntimeError: first line of the failure " + "y" * 600)[:500]
    assert len(result.detail) == 4000 and result.detail.endswith("x" * 100 + "\n")


def test_the_software_given_is_the_software_recorded(planted, device):
    from kernelwatch.harness.device import software_info

    given = dataclasses.replace(software_info(), torch="0.0-given")
    result = check_case(
        planted.kernel("good"), "planted", "smoke", {"n": 70}, "fp32", device, software=given
    )
    assert result.software == given


def test_the_processs_determinism_settings_are_restored_after_a_check(planted, device):
    before = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.use_deterministic_algorithms(True, warn_only=False)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        assert _check(planted, "good", device).verdict == "pass"
        assert (
            torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled(),
            torch.utils.deterministic.fill_uninitialized_memory,
        ) == (True, False, True)
        torch.utils.deterministic.fill_uninitialized_memory = False
        _check(planted, "good", device)
        assert torch.utils.deterministic.fill_uninitialized_memory is False
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])
        torch.utils.deterministic.fill_uninitialized_memory = before[2]


@pytest.mark.parametrize("kernel", ["good", "raises"])
def test_a_checks_duration_is_the_time_it_took(planted, device, kernel, monkeypatch):
    # A clock that reads 1 s when the check starts and 2.5 s later from then on.
    readings = iter([1.0])
    monkeypatch.setattr(time, "perf_counter", lambda: next(readings, 3.5))
    result = _check(planted, kernel, device)
    assert result.duration_s == 2.5
    assert result.seed == 0  # the run seed when none is given


def _writes_its_input(t, o, p, cfg):
    """An entry point that scales its input in place and returns a copy (as a RoPE wrapper
    whose ``transpose().contiguous()`` is a no-op at one head rotates the caller's Q)."""
    config = launch_scale(t["x"], t["x"], 2.0)
    o["y"].copy_(t["x"])
    return config


def test_an_input_written_in_place_is_said_so_not_called_nondeterministic(planted, device):
    """Issue 33: the second launch saw the inputs the first had written and read as
    "nondeterministic: two launches on the same inputs differ in 8 elements of 'y'"."""
    spec = dataclasses.replace(planted.kernel("good"), name="writer", launch=_writes_its_input)
    result = check_case(spec, "planted", "smoke", {"n": 8}, "fp32", device)
    assert result.verdict == "fail"
    assert result.reason == (
        "the launch wrote input 'x' in place (8 of 8 elements changed): declare it in the "
        "spec's inplace, or have the entry point work on a copy"
    )
    assert result.deterministic is True and result.rel_error == 0.0


def test_an_input_constant_by_design_is_declared_and_checked(planted, device):
    """Issue 33: a RoPE table at head_dim 2 is ``[cos t, cos t]``, constant and valid."""
    good = planted.kernel("good")

    def inputs(p, dtype, dev, gen):
        made = good.make_inputs(p, dtype, dev, gen)
        return {**made, "table": torch.full((2,), 0.7651, dtype=dtype)}

    declared = dataclasses.replace(
        good, name="table", make_inputs=inputs, constant_inputs=frozenset({"table"})
    )
    assert check_case(declared, "planted", "smoke", {"n": 8}, "fp32", device).verdict == "pass"
    undeclared = dataclasses.replace(declared, constant_inputs=frozenset())
    refused = check_case(undeclared, "planted", "smoke", {"n": 8}, "fp32", device)
    assert refused.verdict == "error" and "constant_inputs" in refused.reason
    # The exemption is the declared input's alone: a constant input after it is refused.
    after = dataclasses.replace(
        declared,
        make_inputs=lambda p, dtype, dev, gen: {
            "table": torch.full((2,), 0.7651, dtype=dtype),
            "x": torch.ones(p["n"], dtype=dtype),
        },
    )
    refused = check_case(after, "planted", "smoke", {"n": 8}, "fp32", device)
    assert refused.verdict == "error" and "constant tensor 'x'" in refused.reason


def test_a_comparison_is_a_record_nothing_changes_after_the_fact():
    compared = Comparison(None, None, nonfinite=0, unwritten=0, differing=0, failures=())
    with pytest.raises(dataclasses.FrozenInstanceError):
        compared.unwritten = 3
