"""The correctness harness catches each planted failure, in-process, and says which."""

from __future__ import annotations

import pytest
import torch
from planted.broken_suite import launch_scale

from kernelwatch.harness.correctness import SENTINEL, case_seed, check_case, compare
from kernelwatch.harness.records import CaseId
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


def test_unwritten_and_nan_are_told_apart(planted, device):
    tail = _check(planted, "unwritten_tail", device)
    nan = _check(planted, "nan_output", device)
    assert (tail.unwritten, tail.nonfinite) == (3, 0)
    assert (nan.unwritten, nan.nonfinite) == (0, 1)
    assert tail.rel_error is None and nan.rel_error is None


def test_error_keeps_the_traceback(planted, device):
    result = _check(planted, "raises", device)
    assert "Traceback" in result.detail and "_raises" in result.detail


def test_constant_inputs_are_rejected(planted, device):
    good = planted.kernel("good")
    constant = KernelSpec(
        **{
            **good.__dict__,
            "name": "constant",
            "make_inputs": lambda p, dtype, dev, gen: {"x": torch.ones(8, dtype=dtype)},
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


def test_mismatched_output_names_are_an_error(planted, device):
    good = planted.kernel("good")
    renamed = KernelSpec(**{**good.__dict__, "reference": lambda t, p: {"out": 2 * t["x"]}})
    result = check_case(renamed, "planted", "smoke", {"n": 70}, "fp32", device)
    assert result.verdict == "error"
    assert "make the output names match" in result.reason


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
