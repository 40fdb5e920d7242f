"""Issue 33: the commands ``kernelwatch init`` prints work as printed, right after it, in the
repository it ran in: the suite it wrote is not committed yet, and the configuration it
wrote names that suite for every command run inside the checkout."""

from __future__ import annotations

import pytest
from kernelrepo import commit, make_repo

SUITE = "kernelwatch_suite.py"


@pytest.fixture(scope="module")
def initialised(tmp_path_factory, kernelwatch_cli):
    """The acme kernels with two commits, then ``init`` (its files left uncommitted)."""
    repo = make_repo(tmp_path_factory.mktemp("init-commands") / "acme-kernels")
    commit(repo, "docs", {"README.md": "acme kernels, documented\n"})
    init = kernelwatch_cli("init", cwd=repo)
    assert init.returncode == 0, init.stderr
    printed = [line.strip() for line in init.stdout.splitlines() if "kernelwatch " in line]
    return repo, printed


def test_build_diff_as_printed_uses_the_uncommitted_suite_for_both_revisions(
    initialised, kernelwatch_cli
):
    repo, printed = initialised
    (build_diff,) = [line for line in printed if line.startswith("kernelwatch build-diff")]
    proc = kernelwatch_cli(*build_diff.split()[1:], "--arch", "sm_90a", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    for rev in ("HEAD~1", "HEAD"):
        assert f"{SUITE} is not committed at {rev}: using the working tree's copy" in proc.stderr


def test_check_inside_the_configured_checkout_runs_its_suite(initialised, kernelwatch_cli):
    """Without --suite, ``check -k scale`` in the repository used to run the built-in suite:
    "unknown kernel 'scale'; valid kernels: rms_norm, ..."."""
    repo, _ = initialised
    config = {"KERNELWATCH_CONFIG": str(repo / "kernelwatch.toml")}
    for where, env in ((repo, None), (repo / "src" / "acme", config)):
        proc = kernelwatch_cli("check", "-k", "scale", "--dtype", "fp32", cwd=where, env=env)
        assert proc.returncode == 0, proc.stderr
        assert f"suite: {SUITE} of repository 'acme_kernels' (kernelwatch.toml)" in proc.stderr
        assert "check: 0 pass, 0 fail, 0 error, 2 unsupported (2 cases)" in proc.stderr
    elsewhere = kernelwatch_cli("check", "-k", "scale", cwd=repo.parent, env=config)
    assert elsewhere.returncode == 2 and "unknown kernel 'scale'" in elsewhere.stderr
