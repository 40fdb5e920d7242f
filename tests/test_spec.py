"""A malformed suite is refused with every problem named, before any kernel runs."""

from __future__ import annotations

import re

import pytest

from kernelwatch.harness.records import LaunchConfig
from kernelwatch.harness.spec import Baseline, InPlace, KernelSpec, Suite
from kernelwatch.harness.suite import SelectionError, select_tasks


def _spec(name: str = "k", **overrides) -> KernelSpec:
    fields = {
        "name": name,
        "summary": "test",
        "make_inputs": lambda p, dtype, dev, gen: {},
        "make_outputs": lambda t, p: {},
        "launch": lambda t, o, p, cfg: LaunchConfig({}),
        "reference": lambda t, p: {},
        "baseline": Baseline("none", lambda t, p: {}),
        "workloads": {"smoke": ({"n": 1}, {"n": 2})},
        "flops": lambda p: 1,
        "min_bytes": lambda p, e: 1,
        "dtypes": ("fp32", "fp16"),
    }
    return KernelSpec(**{**fields, **overrides})


@pytest.mark.parametrize(
    ("kernels", "problem"),
    [
        ((_spec(), _spec()), "kernel name 'k' is declared twice"),
        ((_spec("Bad-Name"),), "kernel 'Bad-Name': name must match"),
        ((_spec(dtypes=("fp4",)),), "dtypes ['fp4'] must be a non-empty subset"),
        # fp8 has no default tolerance: where a spec rounds to it decides its error.
        ((_spec(dtypes=("fp8",)),), "no tolerance for dtypes ['fp8']"),
        ((_spec(tolerance={"fp32": 1e-5}),), "no tolerance for dtypes ['fp16']"),
        ((_spec(tolerance={"fp32": 0.0, "fp16": 1e-3}),), "tolerance for ['fp32'] must be"),
        ((_spec(workloads={}),), "declares no workloads"),
        ((_spec(workloads={"smoke": ()}),), "workload 'smoke' has no cases"),
        ((_spec(workloads={"smoke": ({"n": [1, 2]},)}),), "are not scalars"),
        ((_spec(configs=(LaunchConfig({"B": 1}),)),), "no pinned_config"),
        ((), "declares no kernels"),
        ((_spec(launch=None),), "needs exactly one of launch (with make_outputs) and call"),
        ((_spec(call=lambda t, p: {}),), "needs exactly one of launch"),
        ((_spec(make_outputs=None),), "has launch but neither make_outputs nor inplace"),
        ((_spec(launch=None, call=lambda t, p: {}),), "drop make_outputs and configs"),
        ((_spec(inplace={"x": "x"}),), "inplace outputs ['x'] must be InPlace(input=...)"),
    ],
)
def test_malformed_suites_are_refused(kernels, problem):
    with pytest.raises(ValueError, match="suite 'x' is malformed") as info:
        Suite("x", kernels)
    assert problem in str(info.value)


def test_selection_expands_kernels_cases_and_dtypes():
    suite = Suite("x", (_spec("a"), _spec("b", workloads={"llm": ({"n": 9},)})))
    tasks = select_tasks(suite, workload="smoke")
    assert [(t.kernel, t.params["n"], t.dtype) for t in tasks] == [
        ("a", 1, "fp32"),
        ("a", 1, "fp16"),
        ("a", 2, "fp32"),
        ("a", 2, "fp16"),
    ]
    assert [t.dtype for t in select_tasks(suite, ["a"], "smoke", ["fp16"])] == ["fp16", "fp16"]
    with pytest.raises(SelectionError, match="kernel b has no workload 'smoke'"):
        select_tasks(suite, ["b"], "smoke")


def test_a_selection_matching_nothing_is_refused():
    suite = Suite("x", (_spec("a", dtypes=("fp32",)),))
    with pytest.raises(SelectionError, match="no case matches: kernels a declare no 'smoke' case"):
        select_tasks(suite, ["a"], "smoke", ["bf16"])


def test_case_parameters_pin_cases_as_a_repro_command_names_them():
    cases = ({"n": 1, "mode": "row major", "fused": True}, {"n": 2, "mode": "col", "fused": False},
             {"n": 2, "mode": "row major", "fused": False, "eps": 1e-05})  # fmt: skip
    suite = Suite("x", (_spec("a", workloads={"smoke": cases}), _spec("b")))
    pinned = select_tasks(suite, (), "smoke", ["fp32"], params=["n=2", "mode=row major"])
    assert [(t.kernel, dict(t.params)) for t in pinned] == [("a", cases[2])]
    # As the store writes parameters (JSON text) and as a user types them.
    for typed, n in ((["fused=true"], 1), (["fused=True"], 1), (["eps=0.00001", "n=2.0"], 2)):
        (task,) = select_tasks(suite, ["a"], "smoke", ["fp32"], params=typed)
        assert task.params["n"] == n, typed
    assert [t.kernel for t in select_tasks(suite, (), "smoke", ["fp32"], params=["n=1"])] == [
        "a", "b"]  # fmt: skip
    with pytest.raises(SelectionError, match=r"no 'smoke' case has n=3; cases: n=1 mode=row"):
        select_tasks(suite, ["a"], "smoke", params=["n=3"])
    for bad, message in ((["n"], "'n' is not KEY=VALUE"), (["n=1", "n=2"], "'n' is given twice")):
        with pytest.raises(SelectionError, match=message):
            select_tasks(suite, ["a"], "smoke", params=bad)


def test_an_entry_point_or_in_place_spec_is_well_formed():
    call = _spec("a", launch=None, make_outputs=None, call=lambda t, p: {"y": t["x"]})
    inplace = _spec("b", make_outputs=None, inplace={"x": InPlace("x")})
    assert Suite("x", (call, inplace)).names == ["a", "b"]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (({}, 4, None), "num_stages must be an int >= 1, got None"),
        (({}, 0, 2), "num_warps must be an int >= 1, got 0"),
        (({"BLOCK": 64}, 4.0, 2), "num_warps must be an int >= 1, got 4.0"),
    ],
)
def test_a_launch_config_refuses_what_its_label_cannot_say(arguments, problem):
    with pytest.raises(ValueError, match=problem):
        LaunchConfig(*arguments)


def test_docs_suites_shows_every_name_a_suite_author_imports():
    """Issue 18: KernelUnsupported (and the parts of a spec) were missing from the page a
    suite author reads."""
    from pathlib import Path

    from kernelwatch.harness import spec

    page = (Path(__file__).parents[1] / "docs" / "SUITES.md").read_text()
    authored = ("Baseline", "InPlace", "KernelSpec", "KernelUnsupported", "LaunchConfig", "Suite")
    assert set(authored) <= set(spec.__all__)
    assert [n for n in authored if not re.search(rf"\b{n}\b", page)] == []
    fields = [f.name for f in __import__("dataclasses").fields(spec.KernelSpec)]
    assert [f for f in fields if f"**`{f}`**" not in page and f"{f}=" not in page] == []
