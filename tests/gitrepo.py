"""Real git repositories for tests: run git with a fixed identity, make a one-commit
repository from files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run git in ``repo`` as a test identity; its stdout, stripped. Fails on an error."""
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def repository_of(repo: Path, files: dict[str, Path], message: str) -> str:
    """A new repository at ``repo`` holding ``files`` (name in the repository: source file),
    committed on ``main``; returns the commit's sha."""
    repo.mkdir(parents=True)
    for name, source in files.items():
        shutil.copy(source, repo / name)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def commit_on(repo: Path, parent: str, files: dict[str, str], message: str) -> str:
    """A commit of ``parent``'s tree with ``files`` (path: text) written in, made without
    touching the work tree, the index or any branch; returns its sha (kept by a ref)."""
    index = repo / ".git" / "index-commit-on"
    env = {"GIT_INDEX_FILE": str(index)}

    def plumbing(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=repo, check=True, capture_output=True, text=True, input=stdin,
            env={**os.environ, **env},
        ).stdout.strip()  # fmt: skip

    plumbing("read-tree", parent)
    for path, text in files.items():
        blob = plumbing("hash-object", "-w", "--stdin", stdin=text)
        plumbing("update-index", "--add", "--cacheinfo", f"100644,{blob},{path}")
    sha = plumbing("commit-tree", plumbing("write-tree"), "-p", parent, "-m", message)
    index.unlink()
    plumbing("update-ref", f"refs/tests/{sha}", sha)
    return sha
