"""Issue 33: a kernel library inside a bigger package. Importing ``biglib.kernels.rms`` runs
``biglib/__init__.py``, which imports the whole stack (here a module this machine lacks);
``kernel_module`` imports the kernel module alone, ``stub_modules`` stands in for what the
kernel module itself needs, and ``init`` writes the suite that way."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from gitrepo import git

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


def test_init_then_check_in_a_library_inside_a_bigger_package(library, kernelwatch_cli):
    """``init`` then ``check``, unedited: exit 0, every case unsupported (it was exit 2,
    "No module named 'kw_training_stack'", from the package's __init__)."""
    repo = library
    (repo / "biglib/kernels/rms.py").write_text(
        FILES["biglib/kernels/rms.py"]
        .replace(
            "from kw_accelerator import fast_path  # an optional library the CPU image lacks\n",
            "",
        )
        .replace("    @fast_path.disable\n", "")
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "kernels")
    init = kernelwatch_cli("init", cwd=repo)
    assert init.returncode == 0, init.stderr
    suite = (repo / "kernelwatch_suite.py").read_text()
    assert 'rms_module = kernel_module("biglib/kernels/rms.py")' in suite
    assert "RMSNorm, _rms_fwd = rms_module.RMSNorm, rms_module._rms_fwd" in suite
    proc = kernelwatch_cli("check", "--json", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert records and {r["verdict"] for r in records} == {"unsupported"}
