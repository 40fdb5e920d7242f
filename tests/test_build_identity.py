"""A case's build identity (issue 48), the pure parts: the hash over a recipe and its
builds (``analysis/build_identity.py``), the SASS code hash that ignores the line table, the
digest of the code that makes a case's inputs, and how a launch's arguments are described.
Real builds of edited suites are ``test_identity_builds.py``'s."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from factories import CASE, CONFIG, build

from kernelwatch.analysis.build_identity import case_key, identical, identities, identity
from kernelwatch.analysis.static_diff import build_key
from kernelwatch.harness.build import sass
from kernelwatch.harness.build.capture import HostOps, describe, work
from kernelwatch.harness.build.plan import code_digest
from kernelwatch.harness.records import CaseRecipe, LaunchStep

BUILD = build(sass_sha256="c" * 64, toolchain={"triton": "3.6.0", "ptxas": "12.8.93"})
STEP = LaunchStep("sm_90a", 0, BUILD.function, BUILD.case, 0, CONFIG, "((4,), [('n', 70)])")
RECIPE = CaseRecipe(CASE.suite, CASE.kernel, CASE.dtype, CASE.workload, CASE.label(),
                    CASE.params, (STEP,), "h" * 64)  # fmt: skip
KEY = case_key(CASE.kernel, CASE.dtype, CASE.params)


def _identity(recipe: CaseRecipe = RECIPE, *builds, environment=()):
    table = {build_key(b): b for b in (builds or (BUILD,))}
    return identity(recipe, table, environment)


def test_the_same_recipe_and_builds_are_one_identity_and_a_recipe_round_trips():
    assert _identity() == _identity() is not None
    assert CaseRecipe.from_json(RECIPE.to_json()) == RECIPE
    assert identities([RECIPE], [BUILD]) == {KEY: _identity()}


@pytest.mark.parametrize(
    "changed",
    [
        {"sass_sha256": "d" * 64},
        {"registers": 41},
        {"shared_dynamic_bytes": 1024},
        {"num_warps": 8},
        # The Triton version in the environment: each build carries its toolchain.
        {"toolchain": {"triton": "3.9.0", "ptxas": "12.8.93"}},
    ],
)
def test_what_the_launch_runs_is_part_of_the_identity(changed):
    assert _identity(RECIPE, dataclasses.replace(BUILD, **changed)) != _identity()


def test_the_grid_the_position_the_host_work_and_the_driver_are_part_of_the_identity():
    other_grid = dataclasses.replace(STEP, work="((5,), [('n', 70)])")
    assert _identity(dataclasses.replace(RECIPE, steps=(other_grid,))) != _identity()
    second = dataclasses.replace(STEP, position=1)
    assert _identity(dataclasses.replace(RECIPE, steps=(second,))) != _identity()
    assert _identity(dataclasses.replace(RECIPE, host="i" * 64)) != _identity()
    assert _identity(environment=[("driver", "580.1")]) != _identity()


@pytest.mark.parametrize(
    "unknown",
    [
        dataclasses.replace(RECIPE, unknown="its launch calls aten.mm.default"),
        dataclasses.replace(RECIPE, steps=()),
        dataclasses.replace(RECIPE, steps=(dataclasses.replace(STEP, work=None),)),
        dataclasses.replace(RECIPE, steps=(dataclasses.replace(STEP, build_index=3),)),
    ],
    ids=["library call", "no launch", "undescribed launch", "no build"],
)
def test_what_cannot_be_identified_has_no_identity_and_is_never_identical(unknown):
    assert _identity(unknown) is None
    assert identical({KEY: None}, {KEY: None}) == frozenset()


def test_a_launch_of_a_dtype_that_is_not_built_is_identified_by_its_builds_cache_key():
    keyed = dataclasses.replace(STEP, build_index=3, key="k" * 64)
    recipe = dataclasses.replace(RECIPE, steps=(keyed,))
    assert _identity(recipe) is not None and _identity(recipe) != _identity()
    other = dataclasses.replace(RECIPE, steps=(dataclasses.replace(keyed, key="l" * 64),))
    assert _identity(other) != _identity(recipe)


def test_a_failed_build_or_one_without_code_hashes_has_no_identity():
    assert _identity(RECIPE, dataclasses.replace(BUILD, status="error")) is None
    assert _identity(RECIPE, dataclasses.replace(BUILD, sass_sha256=None)) is None
    # A build from before the SASS hash was kept: its cubin's hash stands in.
    old = dataclasses.replace(BUILD, sass_sha256=None, cubin_sha256="e" * 64)
    assert _identity(RECIPE, old) is not None


LISTING = """
\tcode for sm_90a
\t\tFunction : {name}
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;      /* 0x00000a00ff017b82 */
        /*0010*/                   {op} R7, SR_CTAID.X ;        /* 0x0000000000077919 */
\t\t..........

"""


def test_the_sass_code_hash_is_per_function_and_changes_with_an_instruction():
    one = sass.code_hashes(LISTING.format(name="k", op="S2R"))
    two = sass.code_hashes(LISTING.format(name="k", op="S2R") + LISTING.format(name="j", op="S2UR"))
    assert set(one) == {"k"} and set(two) == {"k", "j"}
    assert one["k"] == two["k"] != two["j"]
    assert sass.code_hashes(LISTING.format(name="k", op="S2UR"))["k"] != one["k"]


def _helper(n):
    return n + 1


def _make(n):
    # a comment
    return _helper(n) * 2


def _moved(n):

    # the same code, two lines further down and with another comment

    return _helper(n) * 2


def test_the_inputs_digest_ignores_lines_and_follows_the_suites_own_helpers():
    global _helper
    assert code_digest(_make) is not None
    # A different name, but the same code and helper: only the qualified name differs.
    assert code_digest(_make) != code_digest(_moved)
    assert code_digest(_make) == code_digest(_make)
    before = code_digest(_make)
    saved = _helper
    try:
        _helper = lambda n: n + 2  # noqa: E731
        assert code_digest(_make) != before
    finally:
        _helper = saved
    assert code_digest(None) == "none"
    assert code_digest(type("Callable", (), {"__call__": lambda self: 1})()) is None


def test_a_closures_values_are_part_of_the_digest():
    def made(scale):
        return lambda n: n * scale

    assert code_digest(made(2)) != code_digest(made(3))
    assert code_digest(made(2)) == code_digest(made(2))


def test_a_launch_is_described_by_its_grid_and_arguments():
    x = torch.empty((4, 8), device="meta").t()
    text = work(lambda meta: (meta["n"] // 4,), {"x": x, "n": 70, "eps": 1e-6})
    assert text == work((17,), {"x": x, "n": 70, "eps": 1e-6})
    assert "(8, 4)" in text and "(1, 8)" in text  # the view's shape and strides
    assert work((17,), {"x": object()}) is None
    with pytest.raises(ValueError, match="cannot describe"):
        describe(object())


def test_host_ops_describe_torchs_own_kernels_and_name_a_vendor_librarys():
    x = torch.empty((4, 8), device="meta")
    index = torch.zeros((4, 8), dtype=torch.long, device="meta")
    with HostOps() as ops:
        torch.empty_like(x).zero_()
        x.t().contiguous()
        torch.zeros_like(x).scatter_add_(0, index, x).relu_()  # a MoE's combine, say
    assert ops.library is None and len(ops.ops) >= 5, ops.ops
    with HostOps() as other:
        torch.empty_like(x).zero_()
        x.t().contiguous()
        torch.zeros_like(x).scatter_add_(0, index[:2], x[:2]).relu_()
    assert other.ops != ops.ops  # the scatter's shapes are part of it
    for library in (lambda: x @ x.t(), lambda: torch.nn.functional.linear(x, x)):
        with HostOps() as ops:
            library()
        assert ops.library == "aten.mm.default"
