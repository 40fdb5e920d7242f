"""Check out one revision of a repository into an isolated, temporary git worktree.

The build stage imports a commit's kernels from such a checkout, so the repository's own
working tree (someone's uncommitted work) is never touched, and two revisions can be built
side by side.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from kernelwatch.harness.isolation import gitcmd


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
    sha = gitcmd.probe(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if sha is None:
        raise RevisionError(f"unknown revision {rev!r} in {repo}: check `git log` there")
    return sha


def top(directory: Path) -> Path:
    """The top of the git repository holding ``directory``."""
    path = gitcmd.probe(directory, "rev-parse", "--show-toplevel") if directory.is_dir() else None
    if path is None:
        raise RevisionError(f"{directory} is not a git repository: pass --repo PATH to a checkout")
    return Path(path)


@contextlib.contextmanager
def checkout(repo: Path, rev: str) -> Iterator[Checkout]:
    """A detached worktree of ``rev``, removed (with its git bookkeeping) on exit."""
    sha = resolve(repo, rev)
    parent = Path(tempfile.mkdtemp(prefix="kernelwatch-rev-"))
    # The code is no secret, and the sandbox user that imports it must get through.
    parent.chmod(0o755)
    path = parent / sha[:12]
    try:
        try:
            gitcmd.run(repo, "worktree", "add", "--detach", "--quiet", str(path), sha)
        except gitcmd.GitError as exc:
            raise RevisionError(f"cannot check out {sha[:12]}: {exc}") from None
        yield Checkout(path, sha)
    finally:
        # Whatever the removal leaves (a worktree never made), rmtree and prune clear.
        gitcmd.succeeds(repo, "worktree", "remove", "--force", str(path))
        shutil.rmtree(parent, ignore_errors=True)
        gitcmd.succeeds(repo, "worktree", "prune")
