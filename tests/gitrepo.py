"""Real git repositories for tests: run git with a fixed identity, make a one-commit
repository from files."""

from __future__ import annotations

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
