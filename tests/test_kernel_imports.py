"""Issue 33: a kernel library inside a bigger package. Importing ``biglib.kernels.rms`` runs
``biglib/__init__.py``, which imports the whole stack (here a module this machine lacks);
``kernel_module`` imports the kernel module alone, ``stub_modules`` stands in for what the
kernel module itself needs, and ``init`` writes the suite that way."""

from __future__ import annotations

import json
import sys
import textwrap

import biglib
import pytest
from gitrepo import git
from kernelrepo import commit, fill

from kernelwatch.harness.kernel_imports import KernelImportError, kernel_module, stub_modules

FILES = {
    "biglib/__init__.py": "import kw_training_stack  # the rest of the library\n",
    "biglib/kernels/__init__.py": "from .rms import *\nimport kw_training_stack\n",
    "biglib/kernels/utils.py": "def block_for(n):\n    return 64\n",
    "biglib/kernels/rms.py": textwrap.dedent(
        """\
        import torch
        import triton
        import triton.language as tl

        from biglib.kernels.utils import block_for
        from kw_accelerator import fast_path  # an optional library the CPU image lacks


        def _rms_fwd(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            mask = offs < n
            x = tl.load(x_ptr + offs, mask=mask)
            tl.store(y_ptr + offs, x * tl.rsqrt(tl.sum(x * x, axis=0) / n + 1e-6), mask=mask)


        _rms_fwd = triton.jit(_rms_fwd)


        class RMSNorm(torch.autograd.Function):
            @staticmethod
            @fast_path.disable
            def forward(ctx, x):
                y = torch.empty_like(x)
                _rms_fwd[(1,)](x, y, x.numel(), BLOCK=block_for(x.numel()))
                return y
        """
    ),
}


@pytest.fixture
def library(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    before, finders = set(sys.modules), list(sys.meta_path)
    yield tmp_path
    sys.meta_path[:] = finders
    for name in set(sys.modules) - before:
        del sys.modules[name]


def test_a_kernel_module_imports_without_its_packages_init(library):
    with pytest.raises(KernelImportError) as missing:
        kernel_module("biglib/kernels/rms.py")
    assert str(missing.value) == (
        "biglib/kernels/rms.py imports 'kw_accelerator', which is not installed here: install "
        "it, or stand in for it with stub_modules('kw_accelerator') before kernel_module "
        "(docs/SUITES.md)"
    )
    assert stub_modules("kw_accelerator", "json") == ("kw_accelerator",)  # json is installed
    rms = kernel_module("biglib/kernels/rms.py")
    assert rms.RMSNorm.forward.__name__ == "forward"  # the stub's decorator passes it through
    assert rms.block_for(8) == 64
    assert "kw_training_stack" not in sys.modules  # neither __init__.py ran


def test_a_library_inside_a_bigger_package_from_init_to_a_pr_verdict(
    tmp_path, kernelwatch_cli, store_url, prefect_api
):
    """``init`` then ``check``, unedited: exit 0, every case unsupported (it was exit 2,
    "No module named 'kw_training_stack'", from the package's __init__); the three kernels
    filled as docs/SUITES.md says: a green check; a planted slowdown: pr-check's verdict."""
    repo = tmp_path / "biglib"
    for name, text in biglib.FILES.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "kernels")
    init = kernelwatch_cli("init", cwd=repo)
    assert init.returncode == 0, init.stderr
    assert "wrote kernelwatch_suite.py: 3 specs (rms_fwd, scale, swiglu_fwd)" in init.stdout
    suite = (repo / "kernelwatch_suite.py").read_text()
    assert 'rms_module = kernel_module("biglib/kernels/rms.py")' in suite
    assert "RMSNorm, _rms_fwd = rms_module.RMSNorm, rms_module._rms_fwd" in suite
    unedited = kernelwatch_cli("check", "--json", cwd=repo)
    assert unedited.returncode == 0, unedited.stderr
    assert {r["verdict"] for r in _records(unedited.stdout)} == {"unsupported"}

    (repo / "kernelwatch_suite.py").write_text(fill(suite, biglib.FILLING))
    config = (repo / "kernelwatch.toml").read_text()
    (repo / "kernelwatch.toml").write_text(
        config.replace('workload = "smoke"\n', 'workload = "smoke"\narchs = ["sm_90a"]\n')
        + '\n[bench]\ntimer = "cpu-process-time"\nbaseline = false\nbudget_s = 0.3\n'
        + "\n[verdict]\nmargin = 0.5\n"
    )
    base = commit(repo, "kernelwatch suite")
    green = kernelwatch_cli("check", "--json", cwd=repo)
    assert green.returncode == 0, green.stderr
    verdicts = {(r["case"]["kernel"], r["verdict"]) for r in _records(green.stdout)}
    assert verdicts == {("rms_fwd", "pass"), ("scale", "pass"), ("swiglu_fwd", "pass")}

    head = commit(repo, "scale: accumulate", {"biglib/kernels/scale.py": biglib.SLOW_SCALE})
    env = {"KERNELWATCH_DATABASE_URL": store_url, "KERNELWATCH_SPOOL_DIR": str(tmp_path / "spool")}
    verdict = kernelwatch_cli(
        "pr-check", "--base", base, "--head", head, cwd=repo, env={**env, **prefect_api}
    )
    assert verdict.returncode == 1, verdict.stderr[-3000:]
    files = dict(line.split(": ", 1) for line in verdict.stdout.splitlines())
    comment = (repo / files["comment"]).read_text()
    assert "#### Slower (2)" in comment and "| scale | n=333 | fp32 |" in comment, comment
    # rms_fwd's and swiglu_fwd's: the same build at both sides, so not timed (issue 48),
    # counted in the comment and the command's last line
    assert "4 cases identical build: not timed" in comment, comment
    last = verdict.stderr.strip().splitlines()[-1]
    assert last.startswith("pr-check ") and ": regression (" in last, last
    assert last.endswith("4 cases identical build: not timed)"), last


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
