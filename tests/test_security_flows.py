"""A pull request's run poisons nothing a nightly reuses, and a fork's commit can be checked
(issue 17: caches and pickled task results, fork pull requests)."""

from __future__ import annotations

from pathlib import Path

from gitrepo import git, repository_of
from prefect import Task

from kernelwatch.config.settings import RepositoryConfig
from kernelwatch.flows import tasks
from kernelwatch.flows.repos import revision, sync
from kernelwatch.harness.build.stage import BuildRequest, run_build
from kernelwatch.harness.suite import SuiteRef

PLANTED = Path(__file__).parent / "planted" / "broken_suite.py"


def _build(cache: Path, writes: bool) -> list:
    request = BuildRequest(
        SuiteRef(str(PLANTED)),
        archs=("sm_90a",),
        kernels=("good",),
        dtypes=("fp32",),
        workload="smoke",
        cache_dir=str(cache),
        cache_writes=writes,
        workers=1,
    )
    return run_build(request).records


def test_pr_build_owns_no_cache_that_a_nightly_reuses(tmp_path):
    cache = tmp_path / "build-cache"
    untrusted = _build(cache, writes=False)
    assert [r.status for r in untrusted] == ["ok"]
    assert not cache.exists() or not any(cache.rglob("*.json"))
    trusted = _build(cache, writes=True)
    assert [r.cached for r in trusted] == [False]
    builds = [p for p in cache.rglob("*.json") if p.relative_to(cache).parts[0] != "memo"]
    assert len(builds) == 1
    assert len(list((cache / "memo").rglob("*.json"))) == 2  # the suite's and its kernel's
    # Entries are written by the parent only, under keys that cannot be paths.
    (again,) = _build(cache, writes=False)
    assert again.cached


def test_cached_task_results_are_json_never_pickles():
    persisted = [t for t in vars(tasks).values() if isinstance(t, Task) and t.persist_result]
    assert persisted, "no task of flows/tasks.py persists its result"
    for task in persisted:
        serializer = task.result_serializer
        assert getattr(serializer, "type", serializer) == "json", task.name


def test_fork_pr_commit_reachable_only_from_refs_pull_head_is_fetched(tmp_path, monkeypatch):
    origin = tmp_path / "origin"
    repository_of(origin, {"README": PLANTED}, "base")
    git(origin, "checkout", "-qb", "fork-work")
    (origin / "fork.txt").write_text("from a fork\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "fork change")
    fork_sha = git(origin, "rev-parse", "HEAD")
    # GitHub keeps a fork's commits under refs/pull/N/head only.
    git(origin, "update-ref", "refs/pull/7/head", fork_sha)
    git(origin, "checkout", "-q", "main")
    git(origin, "branch", "-D", "fork-work")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    repo = RepositoryConfig("demo", f"file://{origin}", "suite.py")
    path = sync(repo)
    assert revision(path, fork_sha) == fork_sha
    # A commit under no ref at all is fetched by its SHA, where the host serves that.
    git(origin, "checkout", "-qb", "hidden")
    (origin / "hidden.txt").write_text("x\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "hidden")
    hidden = git(origin, "rev-parse", "HEAD")
    git(origin, "checkout", "-q", "main")
    git(origin, "branch", "-D", "hidden")
    git(origin, "config", "uploadpack.allowAnySHA1InWant", "true")
    assert revision(path, hidden) == hidden
