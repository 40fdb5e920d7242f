"""Where a suite file is read from (issue 18): inside the repository it is each checkout's
own, whether named relative to the repository or by its absolute path there; outside it,
the same file for every revision; a relative path only the current directory has is that
file. And how a checkout is forgotten after its suite is loaded beside another's."""

from __future__ import annotations

import sys
from pathlib import Path

from gitrepo import git

from kernelwatch.harness.suite import (
    SuiteRef,
    at_revision,
    in_repository,
    load_suite_isolated,
    locate,
    source_of,
)

#: A module defining ``SPEC``, the smallest valid KernelSpec (never launched here).
TINY_SPEC = (
    "import torch\n"
    "from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig\n"
    "SPEC = KernelSpec(name='k', summary='s', make_inputs=lambda p, d, dev, g: {},\n"
    "    make_outputs=lambda t, p: {}, launch=lambda t, o, p, c: LaunchConfig({}),\n"
    "    reference=lambda t, p: {}, baseline=Baseline('b', lambda t, p: {}),\n"
    "    workloads={'smoke': ({'n': 1},)}, flops=lambda p: 1, min_bytes=lambda p, e: 1)\n"
)


def _folder(root: Path, helper: str, suite: str) -> Path:
    """A folder holding ``suite.py`` (``suite``) and a module ``helper`` defining ``SPEC``."""
    root.mkdir()
    (root / f"{helper}.py").write_text(TINY_SPEC)
    (root / "suite.py").write_text(suite)
    return root


def test_a_suite_inside_the_repository_is_read_from_the_checkout(tmp_path):
    repo, tree = tmp_path / "repo", tmp_path / "worktree"
    inside = str(repo / "suites" / "team.py")
    assert in_repository(inside, repo) == "suites/team.py"
    at = SuiteRef(inside, str(repo), "src")
    assert at_revision(at, repo, tree) == SuiteRef("suites/team.py", str(tree), "src")
    assert at_revision(SuiteRef("team.py"), repo, tree) == SuiteRef("team.py", str(tree))
    outside = str(tmp_path / "elsewhere" / "suite.py")
    assert at_revision(SuiteRef(outside, str(repo)), repo, tree).target == outside
    assert at_revision(SuiteRef("team.kernels"), repo, tree).target == "team.kernels"


def test_a_root_below_the_top_is_the_same_place_in_the_checkout(tmp_path):
    repo, tree = tmp_path / "repo", tmp_path / "worktree"
    below = str(repo / "python")
    assert at_revision(SuiteRef("suite.py", below), repo, tree) == SuiteRef(
        "python/suite.py", str(tree), "python"
    )
    assert at_revision(SuiteRef("team.kernels", below, "src"), repo, tree) == SuiteRef(
        "team.kernels", str(tree), "python/src"
    )


def test_a_relative_suite_only_the_current_directory_has_is_that_file(tmp_path):
    repo, here = tmp_path / "repo", tmp_path / "here"
    (repo / "src").mkdir(parents=True)
    here.mkdir()
    (repo / "in_repo.py").write_text("")
    (here / "mine.py").write_text("")
    (here / "in_repo.py").write_text("")
    # Not in the repository, in the current directory: that file, by its absolute path.
    assert locate("mine.py", repo, here) == str((here / "mine.py").resolve())
    # In the repository (as documented): relative, so each revision reads its own.
    assert locate("in_repo.py", repo, here) == "in_repo.py"
    # From a source root, a file at the repository's top: a revision reads its own.
    found = locate("in_repo.py", repo / "src", repo)
    assert found == str((repo / "in_repo.py").resolve())
    assert at_revision(SuiteRef(found, str(repo)), repo, tmp_path / "tree").target == "in_repo.py"
    assert locate("nowhere.py", repo, here) == "nowhere.py"
    assert locate("team.kernels", repo, here) == "team.kernels"


def test_the_source_names_the_file_and_the_revision(tmp_path):
    repo = tmp_path / "repo"
    (repo / "suites").mkdir(parents=True)
    (repo / "suites" / "team.py").write_text("")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "suite")
    sha = git(repo, "rev-parse", "HEAD")
    assert source_of(repo / "suites" / "team.py") == f"suites/team.py @ {sha[:12]}"
    loose = tmp_path / "loose.py"
    loose.write_text("")
    assert source_of(loose) == str(loose)
    assert Path(source_of(loose)).is_absolute()


def test_forgetting_a_checkout_of_nested_namespace_packages(tmp_path):
    """Issue 18: the A/B loader read a namespace package's __path__ after dropping its
    parent from sys.modules (`KeyError: 'pkg.ops'`), depending on the order it happened to
    visit modules in. Seven nested namespace packages (no __init__.py) leave one order in
    5040 that escaped the bug."""
    levels = "abcdefg"
    suite = (
        "from kernelwatch.harness.spec import Suite\n"
        f"from {'.'.join(levels)}.spec import SPEC\n"
        "SUITE = Suite(name='deep', kernels=(SPEC,))\n"
    )
    spec = TINY_SPEC
    loaded = []
    for checkout in ("one", "two"):
        root = tmp_path / checkout
        (root / "src" / Path(*levels)).mkdir(parents=True)
        (root / "src" / Path(*levels) / "spec.py").write_text(spec)
        (root / "suite.py").write_text(suite)
        loaded.append(load_suite_isolated(SuiteRef("suite.py", str(root), "src")))
    assert [one.suite.names for one in loaded] == [["k"], ["k"]]
    assert not any(name.split(".")[0] == "a" for name in sys.modules)


def test_a_suite_outside_the_repository_imports_the_modules_beside_it(tmp_path):
    """A suite file kept outside the repository (``--suite ~/kw/suite.py --repo .``) with a
    helper module beside it: its own folder is on ``sys.path`` too, after the repository."""
    repo = tmp_path / "repo"
    repo.mkdir()
    outside = _folder(
        tmp_path / "kw",
        "kw_helper_beside",
        "from kernelwatch.harness.spec import Suite\n"
        "from kw_helper_beside import SPEC\n"
        "SUITE = Suite(name='outside', kernels=(SPEC,))\n",
    )
    loaded = load_suite_isolated(SuiteRef(str(outside / "suite.py"), str(repo)))
    assert loaded.suite.names == ["k"]
    assert "kw_helper_beside" not in sys.modules


def test_side_b_never_sees_the_stand_ins_side_a_installed(tmp_path):
    """Issue 33: a suite that stubs a missing optional dependency the way libraries do
    (``find_spec`` first, then a module object in ``sys.modules``). Side A's stub outlived its
    checkout, and B's ``find_spec`` raised "ValueError: kw_heavy_dep.__spec__ is None"."""
    from kernelwatch.harness.isolation.kernel_child import load_suites

    refs = {}
    for side in ("a", "b"):
        root = _folder(
            tmp_path / f"commit-{side}",
            "spec_module",
            "import importlib.util, sys, types\n"
            "if importlib.util.find_spec('kw_heavy_dep') is None:\n"
            "    stub = types.ModuleType('kw_heavy_dep')\n"
            f"    stub.SIDE = {side!r}\n"
            "    sys.modules['kw_heavy_dep'] = stub\n"
            "import kw_heavy_dep\n"
            "from kernelwatch.harness.spec import Suite\n"
            "from spec_module import SPEC\n"
            "SUITE = Suite(name=kw_heavy_dep.SIDE, kernels=(SPEC,))\n",
        )
        refs[side] = SuiteRef("suite.py", str(root)).to_json()
    try:
        sides = load_suites({"mode": "ab", "suite": refs["a"], "suite_b": refs["b"]})
        assert [loaded.suite.name for loaded in sides] == ["a", "b"]
    finally:
        for name in ("kw_heavy_dep", "spec_module"):
            sys.modules.pop(name, None)
