"""A suite living in another repository is discovered and checked through the same command,
with its kernels imported from that repository's checkout."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from gitrepo import git

KERNEL = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig


    @triton.jit
    def axpy_kernel(x_ptr, y_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        y = tl.load(y_ptr + offs, mask=mask).to(tl.float32)
        tl.store(out_ptr + offs, (a * x + y).to(out_ptr.dtype.element_ty), mask=mask)


    def launch(t, o, p, cfg):
        axpy_kernel[(triton.cdiv(int(p["n"]), 64),)](t["x"], t["y"], o["out"], int(p["n"]), A,
                                                     BLOCK=64)
        return LaunchConfig({"BLOCK": 64}, num_warps=4, num_stages=1)


    A = 3.0
    AXPY = KernelSpec(
        name="axpy",
        summary="out = 3x + y",
        make_inputs=lambda p, dtype, dev, gen: {
            name: torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
            for name in ("x", "y")
        },
        make_outputs=lambda t, p: {"out": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"out": 3.0 * t["x"] + t["y"]},
        baseline=Baseline("torch.add", lambda t, p: {"out": torch.add(t["y"], t["x"], alpha=3.0)}),
        workloads={"smoke": ({"n": 1}, {"n": 100}), "big": ({"n": 1 << 20},)},
        flops=lambda p: 2 * int(p["n"]),
        min_bytes=lambda p, e: 3 * e * int(p["n"]),
        dtypes=("fp32", "fp16", "bf16"),
    )
    """
)

SUITE_FILE = textwrap.dedent(
    """
    from kernelwatch.harness.spec import Suite
    from teamkernels.axpy import AXPY

    SUITE = Suite(name="teamx", kernels=(AXPY,))
    """
)


@pytest.fixture
def team_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A kernel repository with two commits: a correct axpy, then a regression (a = 3.5)."""
    repo = tmp_path / "team"
    (repo / "teamkernels").mkdir(parents=True)
    (repo / "teamkernels" / "__init__.py").write_text("")
    (repo / "teamkernels" / "axpy.py").write_text(KERNEL)
    (repo / "kernelwatch_suite.py").write_text(SUITE_FILE)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "axpy")
    good = git(repo, "rev-parse", "HEAD")
    (repo / "teamkernels" / "axpy.py").write_text(KERNEL.replace("A = 3.0", "A = 3.5"))
    git(repo, "commit", "-qam", "tweak a")
    return repo, good, git(repo, "rev-parse", "HEAD")


def _verdicts(stdout: str) -> dict[tuple[str, str, int], str]:
    out = {}
    for line in stdout.splitlines():
        r = json.loads(line)
        out[(r["case"]["suite"], r["case"]["dtype"], r["case"]["params"]["n"])] = r["verdict"]
    return out


def test_suite_file_in_another_repo_is_checked(kernelwatch_cli, team_repo, tmp_path):
    repo, good, _ = team_repo
    checkout = tmp_path / "checkout-good"
    git(repo, "worktree", "add", "-q", "--detach", str(checkout), good)
    proc = kernelwatch_cli(
        "check",
        "--suite",
        "kernelwatch_suite.py",
        "--repo",
        str(checkout),
        "--json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    verdicts = _verdicts(proc.stdout)
    assert {v for (suite, dtype, n), v in verdicts.items() if dtype != "bf16"} == {"pass"}
    assert len(verdicts) == 6 and {s for s, _, _ in verdicts} == {"teamx"}


def test_kernels_come_from_the_checkout_not_elsewhere(kernelwatch_cli, team_repo, tmp_path):
    repo, _, bad = team_repo
    proc = kernelwatch_cli(
        "check",
        "--suite",
        "kernelwatch_suite.py",
        "--repo",
        str(repo),
        "--json",
        "--dtype",
        "fp32",
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert set(_verdicts(proc.stdout).values()) == {"fail"}
    assert git(repo, "rev-parse", "HEAD") == bad


def test_dotted_module_suite_with_repo_root(kernelwatch_cli, team_repo, tmp_path):
    repo, _, _ = team_repo
    proc = kernelwatch_cli(
        "check",
        "--suite",
        "kernelwatch_suite",
        "--repo",
        str(repo),
        "--kernel",
        "axpy",
        "--workload",
        "nope",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "unknown workload 'nope'; valid workloads: big, smoke" in proc.stderr
