"""The tracked repositories as git sees them: a local checkout of each (cloned and fetched
into the cache when the configuration names a URL), its commits, and commit ranges."""

from __future__ import annotations

import fnmatch
import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from kernelwatch.config.settings import RepositoryConfig
from kernelwatch.harness.isolation import gitcmd
from kernelwatch.harness.isolation.worktree import RevisionError, resolve
from kernelwatch.harness.records import CommitInfo


class InfrastructureError(RuntimeError):
    """Something outside the kernels failed (git fetch, the network, a full disk): worth a
    retry, unlike a kernel's failure, which is a result."""


def cache_dir() -> Path:
    """Where remote repositories are cloned: ``$XDG_CACHE_HOME/kernelwatch/repos``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelwatch" / "repos"


def sync(repo: RepositoryConfig) -> Path:
    """A local checkout of ``repo`` with its branch up to date. A local path is used as it
    is (its history is the truth); a URL is cloned once, then fetched."""
    if "://" not in repo.source and not repo.source.startswith("git@"):
        path = Path(repo.source).expanduser()
        if not (path / ".git").exists():
            raise RevisionError(
                f"repository {repo.name}: {repo.source} is not a git checkout; fix its "
                "`source` in the configuration"
            )
        return path
    digest = hashlib.sha256(repo.source.encode()).hexdigest()[:12]
    path = cache_dir() / f"{repo.name}-{digest}"
    if not (path / ".git").exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _git_or_raise(path.parent, "clone", "--quiet", repo.source, str(path))
    # Pull requests' heads too: a fork's commits are reachable only from refs/pull/N/head.
    _git_or_raise(path, "fetch", "--quiet", "--prune", "origin", *FETCHED)
    # Local branch names track the remote's, so revisions like `main` mean the fetched head.
    _git_or_raise(path, "update-ref", f"refs/heads/{repo.branch}", f"origin/{repo.branch}")
    return path


#: What a fetch brings: every branch, and every pull request's head (GitHub's
#: ``refs/pull/N/head``; hosts without them have none to fetch, which is not an error).
FETCHED = (
    "+refs/heads/*:refs/remotes/origin/*",
    "+refs/pull/*/head:refs/remotes/origin/pull/*",
)
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def revision(path: Path, rev: str) -> str:
    """The full SHA ``rev`` names in the checkout at ``path``. A full SHA the checkout does
    not have (a fork's commit not under any ref fetched) is fetched from ``origin`` by SHA
    first."""
    try:
        return resolve(path, rev)
    except RevisionError:
        if not _FULL_SHA.fullmatch(rev) or not (path / ".git").exists():
            raise
    if not gitcmd.succeeds(path, "fetch", "--quiet", "origin", rev):
        raise RevisionError(
            f"commit {rev[:12]} is in no branch or pull request of {path} and origin would not "
            "serve it by SHA"
        )
    return resolve(path, rev)


def commit_info(path: Path, rev: str, branch: str | None = None) -> CommitInfo:
    """What git says about the commit ``rev`` names."""
    sha = resolve(path, rev)
    out = _git_or_raise(path, "show", "-s", "--format=%P%n%aI%n%B", sha)
    parents, author_time, message = [*out.split("\n", 2), "", ""][:3]
    return CommitInfo(sha, tuple(parents.split()), author_time, message.strip(), branch)


def declared_environment(path: Path, sha: str, patterns: Sequence[str]) -> dict[str, str]:
    """The files of commit ``sha`` that declare the environment its kernels run in (paths
    from the top matching one of ``patterns``, fnmatch globs), each with its blob's hash, as
    the build identity's environment takes them: ``declared:PATH`` to the hash."""
    declared = {}
    for entry in _git_or_raise(path, "ls-tree", "-r", "-z", sha).split("\0"):
        meta, _, name = entry.partition("\t")
        if name and any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            declared[f"declared:{name}"] = meta.split()[-1]
    return declared


def commits_between(path: Path, good: str, bad: str) -> list[str]:
    """``good``, then every commit on the first-parent path to ``bad``, oldest first: the
    range a bisection searches. Raises :class:`RevisionError` if ``good`` is not an
    ancestor of ``bad``."""
    good_sha, bad_sha = resolve(path, good), resolve(path, bad)
    if good_sha == bad_sha:
        raise RevisionError(f"good and bad are the same commit {good_sha[:12]}")
    if not gitcmd.succeeds(path, "merge-base", "--is-ancestor", good_sha, bad_sha):
        raise RevisionError(f"{good_sha[:12]} is not an ancestor of {bad_sha[:12]}")
    out = _git_or_raise(
        path, "rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{good_sha}..{bad_sha}"
    )
    return [good_sha, *out.split()]


def _git_or_raise(cwd: Path, *args: str) -> str:
    try:
        return gitcmd.run(cwd, *args)
    except gitcmd.GitError as exc:
        raise InfrastructureError(str(exc)) from None
