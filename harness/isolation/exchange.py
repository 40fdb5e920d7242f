"""The trusted side's half of the runner split (``remote.py``): whether its children run in a
runner, where its staged suites go, and the proxy command that hands a child to it.

A module of its own so that the sandbox, which starts the proxies, and the runner, which
runs jobs in sandboxes of its own, do not import each other. Standard library only: the
proxy imports it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

#: The exchange directory of the trusted side: set, its children run in the runner.
RUNNER_ENV = "KERNELWATCH_RUNNER_DIR"


def exchange_dir(environ: Mapping[str, str] | None = None) -> Path | None:
    """The exchange directory the trusted side hands its children to, if one is set."""
    value = (os.environ if environ is None else environ).get(RUNNER_ENV)
    return Path(value).resolve() if value else None


def trees_dir(exchange: Path) -> Path:
    """Where the trusted side puts its sandbox roots (staged suites): on the requests
    volume, which the runner reads at the same path."""
    return exchange / "requests" / "trees"


def proxy_command(exchange: Path, argv: Sequence[str]) -> list[str]:
    """The command that runs ``argv`` in the runner of ``exchange`` as if it ran here."""
    return [sys.executable, "-m", "kernelwatch.harness.isolation.remote", "proxy",
            str(exchange), "--", *argv]  # fmt: skip
