"""The runner's ``ab`` mode end to end: two commits of one repository, both using the package
name ``kwdemo``, imported side by side by a real child process; real Triton kernels in the
interpreter; planted crashes, hangs and NaN outputs on one side."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from gitrepo import git

from kernelwatch.analysis.verdict import compare_measurements
from kernelwatch.harness.isolation.ab_sides import run_ab
from kernelwatch.harness.isolation.supervise import ABRequest, SelectionUnavailable, SuiteError
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.records import read_record
from kernelwatch.harness.suite import SuiteRef, Task, lacks, load_suite_isolated
from kernelwatch.harness.timing.request import BenchOptions

KERNELS = textwrap.dedent(
    """
    import ctypes
    import time

    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig

    A = 2.0
    REPEAT = 1  # launches per call: the head commit triples it, a deliberate 3x slowdown
    BROKEN = ()  # kernels this commit breaks


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, a * x, mask=offs < n)


    def _launcher(name):
        def launch(t, o, p, cfg):
            a = A
            if name in BROKEN:
                if name == "segfault":
                    ctypes.string_at(0)
                if name == "hangs":
                    time.sleep(3600)
                a = float("nan")
            for _ in range(REPEAT):
                scale_kernel[(triton.cdiv(int(p["n"]), 32),)](t["x"], o["y"], int(p["n"]), a,
                                                              BLOCK=32)
            return LaunchConfig({"BLOCK": 32}, num_warps=4, num_stages=1)

        return launch


    def spec(name):
        return KernelSpec(
            name=name,
            summary="y = a x",
            make_inputs=lambda p, dtype, dev, gen: {
                "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
            },
            make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
            launch=_launcher(name),
            reference=lambda t, p: {"y": 2.0 * t["x"]},
            baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
            workloads={"smoke": ({"n": 96},)},
            flops=lambda p: int(p["n"]),
            min_bytes=lambda p, e: 2 * e * int(p["n"]),
            dtypes=("fp32",),
        )
    """
)

SUITE = textwrap.dedent(
    """
    from kernelwatch.harness.spec import Suite
    from kwdemo.scale import spec

    SUITE = Suite(name="demo", kernels=tuple(spec(n) for n in NAMES))
    """
)

GOOD_NAMES = '("segfault", "nan_out", "hangs", "scale")'
# The runner is under test here, not the timer: the child's own CPU time keeps a planted
# slowdown's margin however loaded the cores are (the wall clock's tests: test_timing*.py).
FAST = BenchOptions(
    timer="cpu-process-time", min_samples=10, min_time_s=0.0, budget_s=0.3, target_rel_ci=0.001
)


def _commit(repo: Path, message: str, names: str, **settings: object) -> str:
    overrides = "".join(f"{name} = {value!r}\n" for name, value in settings.items())
    (repo / "kwdemo" / "scale.py").write_text(KERNELS + overrides)
    (repo / "kernelwatch_suite.py").write_text(f"NAMES = {names}\n" + SUITE)
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Iterator[dict[str, Path]]:
    """Worktrees of four commits of one repository: ``good``; ``slow`` (every launch
    twice); ``broken`` (segfault, NaN output and hang planted, plus a kernel only it has);
    ``tripled`` (A = 3, the same speed as ``good``)."""
    repo = tmp_path_factory.mktemp("demo")
    (repo / "kwdemo").mkdir()
    (repo / "kwdemo" / "__init__.py").write_text("")
    git(repo, "init", "-q", "-b", "main")
    shas = {
        "good": _commit(repo, "good", GOOD_NAMES),
        # 3x, not 2x: on a 2-core machine running two test workers the CPU timer's noise
        # took a 2x slowdown down to 1.3x once.
        "slow": _commit(repo, "slow", GOOD_NAMES, REPEAT=3),
        "broken": _commit(
            repo,
            "broken",
            GOOD_NAMES[:-1] + ', "newer")',
            BROKEN=("segfault", "nan_out", "hangs"),
        ),
        "tripled": _commit(repo, "tripled", GOOD_NAMES, A=3.0),
    }
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(checkout(repo, sha)).path for name, sha in shas.items()}


def _ref(path: Path) -> SuiteRef:
    return SuiteRef("kernelwatch_suite.py", str(path))


def _run(a: Path, b: Path, kernels: tuple[str, ...] = (), timeout: float = 300.0):
    request = ABRequest(
        suite=_ref(a), suite_b=_ref(b), kernels=kernels, options=FAST, case_timeout_s=timeout
    )
    return list(run_ab(request))


def test_a_deliberately_slower_head_is_measured_slower(demo):
    (record,) = _run(demo["good"], demo["slow"], ("scale",))
    assert record.status == "ok", record.reason
    base, head = record.sides()
    assert (base, head) == (record.base, record.head)
    assert len(base.samples_ns) == len(head.samples_ns) >= 10  # one interleaved session
    assert base.baseline is None and head.baseline_samples_ns == ()
    assert base.config == head.config and base.config_source == "heuristic"
    assert head.summary.median_ns > 1.5 * base.summary.median_ns
    verdict = compare_measurements(base, head)
    assert verdict.verdict == "SLOWER" and verdict.ratio > 1.5
    assert read_record(record.to_json()) == record


def test_crash_hang_and_nan_on_one_side_cost_only_their_case(demo):
    records = {r.case.kernel: r for r in _run(demo["good"], demo["broken"], timeout=8.0)}
    assert list(records) == ["segfault", "nan_out", "hangs", "scale", "newer"]
    crash, nan, hang = records["segfault"], records["nan_out"], records["hangs"]
    # Each side is a process of its own: the side that died or hung is named.
    assert crash.status == "error" and crash.reason.startswith("B: died of signal SIGSEGV")
    assert "Extension modules" in crash.detail or "scipy" in crash.detail  # faulthandler's tail
    assert nan.status == "error" and nan.reason.startswith("B: ValueError: 96 of 96 elements")
    assert hang.status == "error" and hang.reason.startswith("B: timed out after 8 s")
    assert crash.base is crash.head is None and crash.sides()[1].status == "error"
    scale = records["scale"]
    assert scale.status == "ok", scale.reason
    assert scale.head.summary.n >= 10
    newer = records["newer"]
    assert newer.status == "unsupported" and newer.reason == "A has no kernel 'newer'"


def test_same_package_name_at_two_commits_loads_side_by_side(demo, device):
    import torch

    good = load_suite_isolated(_ref(demo["good"])).suite.kernel("scale")
    tripled = load_suite_isolated(_ref(demo["tripled"])).suite.kernel("scale")
    x = torch.arange(1.0, 97.0)
    outputs = []
    for spec in (good, tripled):
        y = torch.empty_like(x)
        spec.launch({"x": x}, {"y": y}, {"n": 96}, None)
        outputs.append(y)
    assert torch.equal(outputs[0], 2 * x) and torch.equal(outputs[1], 3 * x)
    assert not any(name.startswith("kwdemo") for name in sys.modules)


def test_a_suite_that_does_not_import_names_its_side(demo, tmp_path):
    with pytest.raises(SuiteError, match=r"side B \(.*nowhere\)"):
        _run(demo["good"], tmp_path / "nowhere")
    with pytest.raises(SelectionUnavailable, match="unknown kernel 'missing'"):
        _run(demo["good"], demo["slow"], ("missing",))


def test_a_case_one_side_lacks_is_named(demo):
    suite = load_suite_isolated(_ref(demo["good"])).suite
    scale = Task("scale", "smoke", {"n": 96}, "fp32", 1e-5)
    assert lacks(suite, scale) is None
    assert lacks(suite, Task("scale", "smoke", {"n": 5}, "fp32", 1e-5)) == (
        "has no 'smoke' case n=5 of 'scale'"
    )
    assert lacks(suite, Task("scale", "smoke", {"n": 96}, "fp16", 1e-3)) == (
        "does not declare fp16 for 'scale'"
    )
    assert lacks(suite, Task("newer", "smoke", {"n": 96}, "fp32", 1e-5)) == (
        "has no kernel 'newer'"
    )
