"""The command that re-times one row of a report at its commit.

The store keeps a repository's name and its suite's name, not where its checkout lives or
which module the suite is: those come from ``kernelwatch.toml`` (``[[repositories]]``
``source`` and ``suite``), passed in as a :class:`Source`. Without one, the repository name
stands in for the checkout and the stored suite name for the suite.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kernelwatch.config.redact import redact_url

if TYPE_CHECKING:
    from kernelwatch.config.settings import Config

#: Where a URL source is cloned by the repro command.
CLONE_DIR = "kw-repro"


@dataclass(frozen=True)
class Source:
    """Where a repository's kernels can run again: a local checkout or a git URL, and the
    suite (a module in it, or a path to a suite file) as ``kernelwatch bench --suite``
    takes it."""

    location: str
    suite: str


def repository_sources(config: Config) -> dict[str, Source]:
    """Where each configured repository lives, for the reports' repro commands."""
    return {r.name: Source(r.source, r.suite) for r in config.repositories.values()}


@dataclass(frozen=True)
class Target:
    """One row to reproduce: a kernel's workload and dtype at a commit."""

    repository: str
    suite: str
    sha: str | None
    kernel: str
    workload: str
    dtype: str


def bench_command(target: Target, source: Source | None = None) -> str:
    """A shell command that checks the commit out and times the row's kernel, workload and
    dtype (every case of that workload: ``bench`` selects no finer)."""
    # A URL's credentials (a token in user info or the query) never reach a report.
    location = redact_url(source.location) if source is not None else target.repository
    suite = source.suite if source is not None else target.suite
    steps = []
    checkout = location
    if "://" in location or location.startswith("git@"):
        steps.append(f"git clone {shlex.quote(location)} {CLONE_DIR}")
        checkout = CLONE_DIR
    if target.sha:
        steps.append(f"git -C {shlex.quote(checkout)} checkout --detach {shlex.quote(target.sha)}")
    bench = [
        "kernelwatch", "bench", "--repo", checkout, "--suite", suite, "--kernel", target.kernel,
        "--workload", target.workload, "--dtype", target.dtype,
    ]  # fmt: skip
    steps.append(shlex.join(bench))
    return " && ".join(steps)
