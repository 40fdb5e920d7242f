"""The build stage on a real kernel repository: commits that spill, lose the tensor-core path
or stop compiling are flagged, and an unchanged kernel is served from the cache.

One small suite (an elementwise kernel and a 64x64 tile matmul, fp32, sm_90a only) keeps the
real compiles to a few seconds.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from gitrepo import git

from kernelwatch.analysis.static_diff import diff_builds
from kernelwatch.harness.build.stage import BuildFailed, BuildRequest, BuildResult, run_build
from kernelwatch.harness.isolation.worktree import RevisionError, checkout
from kernelwatch.harness.suite import SuiteRef

KERNELS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig


    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(tl.float32)
        # BODY
        tl.store(out_ptr + offs, 2 * x, mask=offs < n)


    @triton.jit
    def tile_dot_kernel(a_ptr, b_ptr, c_ptr, BLOCK: tl.constexpr, PRECISION: tl.constexpr):
        r = tl.arange(0, BLOCK)
        a = tl.load(a_ptr + r[:, None] * BLOCK + r[None, :])
        b = tl.load(b_ptr + r[:, None] * BLOCK + r[None, :])
        tl.store(c_ptr + r[:, None] * BLOCK + r[None, :], tl.dot(a, b, input_precision=PRECISION))


    def scale(t, o, p, cfg):
        scale_kernel[(1,)](t["x"], o["out"], int(p["n"]), BLOCK=4096, num_warps=1, num_stages=1)
        return LaunchConfig({"BLOCK": 4096}, num_warps=1, num_stages=1)


    def tile_dot(t, o, p, cfg):
        tile_dot_kernel[(1,)](t["a"], t["b"], o["c"], BLOCK=64, PRECISION="tf32", num_warps=4)
        return LaunchConfig({"BLOCK": 64}, num_warps=4, num_stages=3)


    def spec(name, launch, inputs, outputs):
        return KernelSpec(
            name=name,
            summary=name,
            make_inputs=lambda p, dtype, dev, gen: {
                k: torch.randn(s, generator=gen, device=dev).to(dtype) for k, s in inputs.items()
            },
            make_outputs=lambda t, p: {k: torch.empty_like(t[v]) for k, v in outputs.items()},
            launch=launch,
            reference=lambda t, p: {},
            baseline=Baseline("none", lambda t, p: {}),
            workloads={"smoke": ({"n": 4096},)},
            flops=lambda p: 1,
            min_bytes=lambda p, e: 1,
            dtypes=("fp32",),
        )


    SCALE = spec("scale", scale, {"x": (4096,)}, {"out": "x"})
    TILE_DOT = spec("tile_dot", tile_dot, {"a": (64, 64), "b": (64, 64)}, {"c": "a"})
    """
)
SUITE = textwrap.dedent(
    """
    from kernelwatch.harness.spec import Suite
    from teamkernels.k import SCALE, TILE_DOT

    SUITE = Suite(name="team", kernels=(SCALE, TILE_DOT))
    """
)
# Three reductions over a 4096-element row held by one warp: more live values than registers.
SPILLING_BODY = """x = tl.exp(x - tl.max(x, 0)) / tl.sum(tl.exp(x - tl.max(x, 0)), 0) + tl.sqrt(
            x * x + 1.0
        ) / tl.sum(tl.sqrt(x * x + 1.0), 0)"""


def _commit(repo: Path, source: str, message: str) -> str:
    (repo / "teamkernels" / "k.py").write_text(source)
    git(repo, "commit", "-qam", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """base -> spills (scale) -> no tensor cores (tile_dot) -> does not compile (tile_dot)."""
    repo = tmp_path_factory.mktemp("team")
    (repo / "teamkernels").mkdir()
    (repo / "teamkernels" / "__init__.py").write_text("")
    (repo / "teamkernels" / "k.py").write_text(KERNELS)
    (repo / "kernelwatch_suite.py").write_text(SUITE)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    revs = {"base": git(repo, "rev-parse", "HEAD")}
    source = KERNELS.replace("# BODY", SPILLING_BODY)
    revs["spills"] = _commit(repo, source, "fuse a softmax into scale")
    source = source.replace('PRECISION="tf32"', 'PRECISION="ieee"')
    revs["no_tc"] = _commit(repo, source, "exact fp32 products")
    source = source.replace("b = tl.load(", "b = tl.bogus_op(")
    revs["broken"] = _commit(repo, source, "typo")
    return repo, revs


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(scope="module")
def builds(history, cache) -> dict[str, BuildResult]:
    """Every commit built once, in history order, through one cache."""
    repo, revs = history
    return {name: _build(repo, rev, cache) for name, rev in revs.items()}


def _build(repo: Path, rev: str, cache: Path) -> BuildResult:
    with checkout(repo, rev) as tree:
        suite = SuiteRef("kernelwatch_suite.py", str(tree.path))
        request = BuildRequest(suite, archs=("sm_90a",), cache_dir=str(cache), workers=1)
        return run_build(request)


def _by_kernel(result: BuildResult) -> dict[str, object]:
    return {r.kernel: r for r in result.records}


def test_base_builds_with_metrics(builds):
    base = _by_kernel(builds["base"])
    assert builds["base"].suite == "team"
    assert set(base) == {"scale", "tile_dot"}
    dot, scale = base["tile_dot"], base["scale"]
    assert dot.status == "ok" and dot.tensor_core == "HGMMA" and dot.arch == "sm_90a"
    assert dot.num_warps == 4 and dot.registers > 0 and dot.spill_store_bytes == 0
    assert dot.opcodes and dot.instructions > 0 and len(dot.cubin_sha256) == 64
    assert dot.toolchain["triton"] and dot.toolchain["ptxas"]
    assert scale.tensor_core == "none" and scale.global_load_bits == 128
    assert scale.config.label() == "BLOCK=4096,w1,s1" and scale.case == "n=4096"


def test_commit_that_forces_spills_is_flagged(builds):
    findings = diff_builds(builds["base"].records, builds["spills"].records)
    assert {(f.rule, f.kernel) for f in findings} >= {("spills", "scale")}
    assert all(f.kernel == "scale" for f in findings)
    # Only scale changed. tile_dot lives in scale's file, and a cached record is bound to
    # its kernel's files as the parent read them (issue 46: a child cannot plant a record
    # under another commit's key), so tile_dot is compiled again, to the same code.
    after, before = _by_kernel(builds["spills"]), _by_kernel(builds["base"])
    assert not after["scale"].cached and not after["tile_dot"].cached
    assert after["tile_dot"].sass_sha256 == before["tile_dot"].sass_sha256


def test_commit_that_loses_the_tensor_core_path_is_flagged(builds):
    findings = diff_builds(builds["spills"].records, builds["no_tc"].records)
    lost = [f for f in findings if f.rule == "tensor_core"]
    assert [(f.kernel, f.arch, f.before, f.after) for f in lost] == [
        ("tile_dot", "sm_90a", "HGMMA", "none")
    ]


def test_kernel_that_stops_compiling_is_reported_and_the_rest_build(builds):
    after = _by_kernel(builds["broken"])
    assert after["tile_dot"].status == "error"
    assert "bogus_op" in after["tile_dot"].reason + after["tile_dot"].detail
    assert after["scale"].status == "ok"
    findings = diff_builds(builds["no_tc"].records, builds["broken"].records)
    assert [(f.rule, f.kernel) for f in findings] == [("no_longer_compiles", "tile_dot")]


def test_same_commit_twice_is_served_from_the_cache(history, cache, builds):
    repo, revs = history
    again = _build(repo, revs["base"], cache)
    assert [r.cached for r in again.records] == [True, True]
    first = {r.kernel: r.cubin_sha256 for r in builds["base"].records}
    assert {r.kernel: r.cubin_sha256 for r in again.records} == first


def test_suite_that_fails_to_import_is_one_error(tmp_path):
    broken = tmp_path / "suite.py"
    broken.write_text("raise ImportError('no such kernels')\n")
    with pytest.raises(BuildFailed, match=r"could not import suite .* no such kernels"):
        run_build(BuildRequest(SuiteRef(str(broken)), archs=("sm_90a",), workers=1))


def test_unknown_revision(history):
    repo, _ = history
    with pytest.raises(RevisionError, match="unknown revision 'nope'"), checkout(repo, "nope"):
        pass


def test_cli_build_diff_exit_codes(kernelwatch_cli, history, cache, builds, monkeypatch, tmp_path):
    repo, revs = history
    monkeypatch.setenv("KERNELWATCH_BUILD_CACHE", str(cache))
    common = ("--suite", "kernelwatch_suite.py", "--repo", str(repo), "--arch", "sm_90a")
    common += ("--workers", "1")
    # tile_dot's instructions grow about 13x, far over the default limit but under this
    # kernelwatch.toml's [static] limit of 20x.
    config = tmp_path / "kernelwatch.toml"
    config.write_text("[static]\nmax_instruction_growth = 20.0\n")
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    proc = kernelwatch_cli(
        "build-diff", revs["spills"], revs["no_tc"], *common, "--json", "--metrics"
    )
    assert proc.returncode == 1, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    rules = {line["rule"] for line in lines if line["kind"] == "static_regression"}
    assert "tensor_core" in rules and "instructions" not in rules
    pairs = [(p["before"], p["after"]) for p in lines if p["kind"] == "build_pair"]
    assert any(a["tensor_core"] != b["tensor_core"] for a, b in pairs), pairs
    # Nothing regressed, and the metrics compared are still shown on request (issue 33).
    same = kernelwatch_cli("build-diff", revs["base"], revs["base"], *common, "--metrics")
    assert same.returncode == 0, same.stderr
    assert (
        "builds compared (before -> after)" in same.stdout
        and " -> " not in (same.stdout.split("builds compared (before -> after)")[1])
    )
    bad = kernelwatch_cli("build-diff", "nope", revs["base"], *common)
    assert bad.returncode == 2 and bad.stderr.strip().count("\n") == 0
    assert "unknown revision 'nope'" in bad.stderr
    limit = kernelwatch_cli("build-diff", "a", "b", "--max-instruction-growth", "-1")
    assert limit.returncode == 2 and "max_instruction_growth must be at least 0" in limit.stderr
    arch = kernelwatch_cli("build", "--arch", "sm_75")
    assert arch.returncode == 2 and "unknown arch 'sm_75'" in arch.stderr
