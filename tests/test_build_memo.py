"""Issue 49, item 1: builds cost what changed. The parent keys a build's records by the
files that decide them (``harness/build/memo.py``), read before any child imports torch or
Triton: an unchanged commit starts no child, a commit that changes one kernel's module
compiles that kernel only, a change to a helper both kernels import rebuilds both, and a
pull request's build (no cache writes) stores nothing. Each commit is built from its own
worktree of one git repository, as the nightly and the PR check build them."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gitrepo import git

from kernelwatch.harness.build import memo, stage
from kernelwatch.harness.build.stage import BuildRequest, BuildResult, run_build
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef

PACKAGE = Path(__file__).parent / "planted" / "memo_suite"
KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def _commit(repo: Path, message: str, edit: tuple[str, str, str] | None = None) -> str:
    if edit is not None:
        path = repo / "memo_suite" / edit[0]
        text = path.read_text()
        assert edit[1] in text
        path.write_text(text.replace(edit[1], edit[2]))
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """The suite, then: the same tree again (a docs-only commit), scale's module edited,
    the shared helper edited."""
    root = tmp_path_factory.mktemp("memo")
    repo = root / "repo"
    shutil.copytree(PACKAGE, repo / "memo_suite", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    shas = {"first": _commit(repo, "two kernels")}
    (repo / "NOTES.md").write_text("how the suite is laid out\n")
    shas["docs"] = _commit(repo, "notes")
    shas["scale"] = _commit(repo, "scale triples", ("scale.py", "x * 2.0", "x * 3.0"))
    shas["helper"] = _commit(repo, "inputs in [0, 1)", ("common.py", "torch.randn(", "torch.rand("))
    return root, repo, shas


class Spy:
    """Which builds the children looked up in the cache: a kernel a child compiles or
    takes from the cache is looked up; one the memo holds never reaches a child."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.lookups = 0
        self.children = 0
        serve, spawn = stage._serve_cache, stage.spawn

        def counted_serve(event, *args):
            self.lookups += event["event"] == "lookup"
            return serve(event, *args)

        def counted_spawn(*args, **kwargs):
            self.children += 1
            return spawn(*args, **kwargs)

        monkeypatch.setattr(stage, "_serve_cache", counted_serve)
        monkeypatch.setattr(stage, "spawn", counted_spawn)


def _build(repo: Path, sha: str, cache: Path, writes: bool = True) -> BuildResult:
    with checkout(repo, sha) as tree:
        request = BuildRequest(SuiteRef(str(tree.path / "memo_suite" / "suite.py"), str(tree.path)),
                               archs=("sm_90a",), workload="smoke", cache_dir=str(cache),
                               cache_writes=writes, workers=1)  # fmt: skip
        return run_build(request)


def _fresh(result: BuildResult) -> set[str]:
    return {r.kernel for r in result.records if not r.cached}


def test_only_what_a_commit_changed_is_built(history, monkeypatch):
    root, repo, shas = history
    cache = root / "cache"
    first = _build(repo, shas["first"], cache)
    assert _fresh(first) == {"scale", "shift"} and all(r.status == "ok" for r in first.records)
    assert {r.kernel for r in first.recipes} == {"scale", "shift"}

    spy = Spy(monkeypatch)
    again = _build(repo, shas["docs"], cache)
    assert spy.children == 0  # no child: nothing imported torch, Triton or the suite
    assert again.records == [r.__class__(**{**vars(r), "cached": True}) for r in first.records]
    assert again.recipes == first.recipes and again.suite == "memo"

    scaled = _build(repo, shas["scale"], cache)
    assert spy.children == 1 and spy.lookups == 1  # scale's one build; shift never asked
    assert _fresh(scaled) == {"scale"}
    assert [r.kernel for r in scaled.records] == [r.kernel for r in first.records]
    assert {r.kernel for r in scaled.recipes} == {"scale", "shift"}
    (old,), (new,) = ([r for r in b.records if r.kernel == "scale"] for b in (first, scaled))
    assert old.sass_sha256 != new.sass_sha256

    _build(repo, shas["helper"], cache)
    # Both import the helper: both are recorded again (their compiled code is the cache's).
    assert spy.children == 2 and spy.lookups == 3


def test_a_pull_requests_build_stores_nothing(history, monkeypatch):
    root, repo, shas = history
    cache = root / "pr-cache"
    _build(repo, shas["first"], cache, writes=False)
    spy = Spy(monkeypatch)
    _build(repo, shas["first"], cache, writes=False)
    assert spy.children == 1 and spy.lookups == 2
    assert not (cache / "memo").exists()


def _tree(tmp_path: Path, files: dict[str, str]) -> memo.SourceTree:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    tree = memo.scan(SuiteRef(str(tmp_path / "pkg" / "suite.py"), str(tmp_path)))
    assert tree is not None
    return tree


def test_a_kernels_files_are_what_its_modules_import_and_name(tmp_path):
    tree = _tree(tmp_path, {
        "pkg/__init__.py": "from pkg import a, b\n",
        "pkg/suite.py": "from pkg import a, b\n",
        "pkg/a.py": "from .helpers import f\nKERNEL = 'cuda/a.cu'\n",
        "pkg/b.py": "import importlib\nm = importlib.import_module('pkg.lazy')\n",
        "pkg/helpers.py": "from pkg.deep import g\n",
        "pkg/deep.py": "",
        "pkg/lazy.py": "",
        "pkg/unused.py": "",
        "pkg/broken.py": "def (:\n",
        "pkg/cuda/a.cu": "__global__ void a() {}\n",
        "pkg/cuda/b.cu": "__global__ void b() {}\n",
        "README.md": "docs\n",
    })  # fmt: skip
    assert "README.md" not in tree.files
    # The package above an imported module is its file, not what it imports (b).
    assert set(tree.closure(["pkg/a.py"])) == {
        "pkg/suite.py", "pkg/__init__.py", "pkg/a.py", "pkg/helpers.py", "pkg/deep.py",
        "pkg/cuda/a.cu",
    }  # fmt: skip
    assert set(tree.closure(["pkg/b.py"])) == {
        "pkg/suite.py", "pkg/__init__.py", "pkg/b.py", "pkg/lazy.py",
    }  # fmt: skip
    assert tree.closure(["pkg/broken.py"]) is None


def test_the_builtin_suites_kernels_are_keyed_by_their_own_modules():
    tree = memo.scan(SuiteRef(BUILTIN_SUITE, str(KERNELS.parent)))
    assert tree is not None and tree.entry == "__init__.py"
    softmax = set(tree.closure(["softmax.py"]))
    assert softmax == {"__init__.py", "softmax.py", "inputs.py"}
    assert "cuda/silu_and_mul.cu" in tree.closure(["silu_cuda.py"])
    # The CuTe DSL kernel's spec names its module rather than importing it (the DSL is an
    # optional extra); an edit to that module must still build the kernel again.
    cute = set(tree.closure(["silu_cute.py"]))
    assert {"cute_dsl/silu_and_mul.py", "cute_dsl/__init__.py", "activation.py"} <= cute
    assert "softmax.py" not in tree.closure(["rmsnorm.py"])


def test_a_record_planted_for_another_commits_key_is_never_found(history, tmp_path):
    """Issue 46: a tracked commit's build child (its suite's code runs there) stores a forged
    record under the key the next commit's changed kernel will look up. The parent stores
    it under that key bound to this commit's source of the kernel, so the next commit
    compiles its kernel and reports what it compiled."""
    _, repo, shas = history
    keys: list[str] = []
    serve = stage._serve_cache

    def spy(event, *args):
        if event["event"] == "lookup":
            keys.append(event["key"])
        return serve(event, *args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stage, "_serve_cache", spy)
        honest = _build(repo, shas["scale"], tmp_path / "scratch")
    future = keys[0]  # scale's one build: the suite's first kernel, one build child
    (real,) = [r for r in honest.records if r.kernel == "scale"]

    git(repo, "checkout", "-q", "-b", "hostile", shas["first"])
    suite = repo / "memo_suite" / "suite.py"
    suite.write_text(suite.read_text() + HOSTILE.replace("FUTURE", future))
    hostile = _commit(repo, "plant")
    git(repo, "checkout", "-q", "main")
    cache = tmp_path / "cache"
    _build(repo, hostile, cache)
    after = _build(repo, shas["scale"], cache)
    (scale,) = [r for r in after.records if r.kernel == "scale"]
    assert scale.registers == real.registers != 999 and not scale.cached


#: The planted store: every build this child stores is stored again, forged, under FUTURE.
HOSTILE = """
import dataclasses as _dataclasses
import sys as _sys

# The build worker runs as __main__: its ParentCache is that module's.
_cache = _sys.modules["__main__"].ParentCache
_put = _cache.put


def _forge(self, key, record):
    _put(self, key, record)
    _put(self, "FUTURE", _dataclasses.replace(record, registers=999))


_cache.put = _forge
"""
