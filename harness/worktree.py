"""Check out one revision of a repository into an isolated, temporary git worktree.

The build stage imports a commit's kernels from such a checkout, so the repository's own
working tree (someone's uncommitted work) is never touched, and two revisions can be built
side by side.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


class RevisionError(ValueError):
    """The repository or the revision does not exist; the message is one line."""


@dataclass(frozen=True)
class Checkout:
    path: Path
    sha: str


def resolve(repo: Path, rev: str) -> str:
    """The full commit SHA ``rev`` names in ``repo``."""
    if not (repo / ".git").exists():
        raise RevisionError(f"{repo} is not a git repository: pass --repo PATH to a checkout")
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if proc.returncode != 0:
        raise RevisionError(f"unknown revision {rev!r} in {repo}: check `git log` there")
    return proc.stdout.strip()


@contextlib.contextmanager
def checkout(repo: Path, rev: str) -> Iterator[Checkout]:
    """A detached worktree of ``rev``, removed (with its git bookkeeping) on exit."""
    sha = resolve(repo, rev)
    parent = Path(tempfile.mkdtemp(prefix="kernelwatch-rev-"))
    # The code is no secret, and the sandbox user that imports it must get through.
    parent.chmod(0o755)
    path = parent / sha[:12]
    try:
        proc = _git(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        if proc.returncode != 0:
            raise RevisionError(f"git worktree add {sha[:12]} failed: {proc.stderr.strip()}")
        yield Checkout(path, sha)
    finally:
        _git(repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        _git(repo, "worktree", "prune")


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
