"""Every git command kernelwatch runs goes through ``harness/isolation/gitcmd.py``, and none of them
lets the repository run a program: not its hooks (nor a template's), not an fsmonitor or a
filter driver its own configuration names. The programs planted here write a marker file;
the marker must never appear."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from gitrepo import commit_on, git

from kernelwatch.config.settings import ENVIRONMENT_FILES, RepositoryConfig
from kernelwatch.flows.demo_repo import make_demo_repo
from kernelwatch.flows.repos import commit_info, commits_between, declared_environment, sync
from kernelwatch.harness.isolation import gitcmd
from kernelwatch.harness.isolation.worktree import checkout, resolve
from kernelwatch.harness.suite import revision_of, source_of

ROOT = Path(__file__).resolve().parent.parent
GIT_MODULE = ROOT / "harness" / "isolation" / "gitcmd.py"
HOOKS = ("post-checkout", "pre-commit", "post-commit", "reference-transaction")


def _program(path: Path, marker: Path, fail: bool = False) -> Path:
    """An executable script that notes its name in ``marker``, then copies stdin to stdout
    (a filter that ran would leave the file as it was), or exits 1 (an fsmonitor that
    failed makes git scan the tree itself)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tail = "exit 1" if fail else "cat"
    path.write_text(f"#!/bin/sh\necho {path.name} >> {marker}\n{tail}\n")
    path.chmod(0o755)
    return path


def _repository(path: Path) -> tuple[Path, str, str]:
    """A repository of two commits; returns it with both SHAs, oldest first."""
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "kernel.py").write_text("X = 1\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    first = git(path, "rev-parse", "HEAD")
    (path / "kernel.py").write_text("X = 2\n")
    git(path, "commit", "-qam", "second")
    return path, first, git(path, "rev-parse", "HEAD")


def _ran(marker: Path) -> str:
    return marker.read_text() if marker.exists() else ""


def test_the_declared_environment_is_each_matching_file_of_the_commit_with_its_blob(tmp_path):
    """Issue 48: a commit that changes only a pin of the environment (requirements.txt's
    Triton) declares another environment; one that changes docs, or a file named like a
    requirement file below the top, declares the same."""
    repo, first, _ = _repository(tmp_path / "r")
    files = {"requirements.txt": "triton==3.5.0\n", "docker/Dockerfile": "FROM cuda\n",
             "pyproject.toml": "[project]\nname = 'k'\n", "README.md": "# k\n"}  # fmt: skip
    base = commit_on(repo, first, files, "pins")
    pinned = declared_environment(repo, base, ENVIRONMENT_FILES)
    assert sorted(pinned) == ["declared:pyproject.toml", "declared:requirements.txt"], pinned
    assert pinned["declared:requirements.txt"] == git(repo, "rev-parse", f"{base}:requirements.txt")
    bumped = commit_on(repo, base, {"requirements.txt": "triton==3.6.0\n"}, "triton 3.6")
    docs = commit_on(repo, base, {"README.md": "# k\nmore\n", "tests/requirements.txt": "x"}, "d")
    assert declared_environment(repo, bumped, ENVIRONMENT_FILES) != pinned
    assert declared_environment(repo, docs, ENVIRONMENT_FILES) == pinned
    assert declared_environment(repo, first, ENVIRONMENT_FILES) == {}
    assert declared_environment(repo, base, ("docker/*",)) == {
        "declared:docker/Dockerfile": git(repo, "rev-parse", f"{base}:docker/Dockerfile")
    }


def test_a_worktree_of_a_repository_with_hooks_runs_none_of_them(tmp_path):
    repo, _, head = _repository(tmp_path / "repo")
    marker = tmp_path / "ran"
    for hook in HOOKS:
        _program(repo / ".git" / "hooks" / hook, marker)
    with checkout(repo, "main") as tree:
        assert (tree.path / "kernel.py").read_text() == "X = 2\n"
        assert tree.sha == head
    assert _ran(marker) == ""


def test_repositories_the_product_makes_or_clones_run_no_template_hook(tmp_path, monkeypatch):
    marker = tmp_path / "ran"
    template = tmp_path / "template"
    for hook in HOOKS:
        _program(template / "hooks" / hook, marker)
    repo, _, head = _repository(tmp_path / "repo")
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    demo = make_demo_repo(tmp_path / "demo", nights=2, culprit_night=1)
    assert git(demo.path, "log", "-1", "--format=%an") == "kernelwatch demo"
    remote = RepositoryConfig(name="acme", source=repo.as_uri(), suite="suite.py")
    assert resolve(sync(remote), "main") == head
    assert _ran(marker) == ""


def test_an_fsmonitor_the_repository_configures_never_runs(tmp_path, kernelwatch_cli):
    repo, first, head = _repository(tmp_path / "repo")
    marker = tmp_path / "ran"
    git(repo, "config", "core.fsmonitor", str(_program(tmp_path / "fsmonitor", marker, True)))
    assert resolve(repo, "HEAD") == revision_of(repo) == head
    assert source_of(repo / "kernel.py") == f"kernel.py @ {head[:12]}"
    assert commit_info(repo, head).parents == (first,)
    assert commits_between(repo, first, head) == [first, head]
    with checkout(repo, first) as tree:
        assert (tree.path / "kernel.py").read_text() == "X = 1\n"
    # init lists the files git knows before it finds no kernel among them
    assert kernelwatch_cli("init", cwd=repo).returncode == 2
    assert _ran(marker) == ""


def test_a_filter_driver_the_repository_configures_never_runs(tmp_path):
    repo, _, _ = _repository(tmp_path / "repo")
    marker = tmp_path / "ran"
    # "=" in the driver's name: an override given as `-c KEY=VALUE` would split there.
    (repo / ".gitattributes").write_text("*.py filter=plan=ted\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-qm", "attributes")
    program = str(_program(tmp_path / "filter", marker))
    for key in ("smudge", "clean", "process"):
        git(repo, "config", f"filter.plan=ted.{key}", program)
    git(repo, "config", "filter.plan=ted.required", "true")
    with checkout(repo, "HEAD") as tree:
        assert (tree.path / "kernel.py").read_text() == "X = 2\n"
    assert _ran(marker) == ""


def test_a_git_failure_is_one_line_naming_the_command_and_the_directory(tmp_path):
    with pytest.raises(gitcmd.GitError) as caught:
        gitcmd.run(tmp_path, "rev-parse", "--verify", "no-such-revision")
    assert "\n" not in str(caught.value)
    assert str(caught.value).startswith(f"git rev-parse in {tmp_path} failed: ")
    assert gitcmd.probe(tmp_path, "rev-parse", "HEAD") is None
    assert not gitcmd.succeeds(tmp_path, "rev-parse", "HEAD")


def _git_commands(path: Path) -> list[str]:
    """Where ``path`` spells a git command: a list or tuple starting with "git", or a
    process-starting call (``subprocess.*``, ``os.exec*``/``os.spawn*``/``os.system``)
    with "git" among its arguments' strings."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.List | ast.Tuple) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value == "git":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif isinstance(node, ast.Call) and _starts_a_process(node.func):
            words = [
                word
                for arg in node.args
                for sub in ast.walk(arg)
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
                for word in sub.value.split()[:1]
            ]
            if "git" in words:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def _starts_a_process(func: ast.expr) -> bool:
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return False
    if func.value.id == "subprocess":
        return True
    return func.value.id == "os" and func.attr.startswith(("exec", "spawn", "system", "popen"))


def test_no_product_module_but_the_git_module_runs_git():
    packages = sorted(p.parent for p in ROOT.glob("*/__init__.py"))
    modules = [m for package in packages for m in sorted(package.rglob("*.py"))]
    assert GIT_MODULE in modules
    wrong = [where for m in modules if m != GIT_MODULE for where in _git_commands(m)]
    assert not wrong, "run git through kernelwatch.harness.isolation.gitcmd:\n" + "\n".join(wrong)
    assert _git_commands(GIT_MODULE), "the git module no longer runs git the way this scans"
