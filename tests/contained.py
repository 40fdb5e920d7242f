"""A job's sandbox as the runner's container makes it: a leased uid, no namespaces, a
private directory given to that uid (tests/test_security_jobs.py, tests/test_preload.py)."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kernelwatch.harness.isolation import sandbox as sandbox_module
from kernelwatch.harness.isolation.sandbox import Sandbox, leased_identity


@contextlib.contextmanager
def contained_sandbox(kind: type[Sandbox] = Sandbox) -> Iterator[Sandbox]:
    """A ``kind`` sandbox under a leased uid without namespaces; the lease and the directory
    end with the block."""
    with leased_identity() as identity:
        assert identity is not None
        root = Path(tempfile.mkdtemp(prefix="kw-job-"))
        try:
            for sub in ("home", "tmp", "triton", "suites"):
                (root / sub).mkdir()
            sandbox_module._give(root, identity)
            yield kind(root, identity, namespaces=False)
        finally:
            shutil.rmtree(root, ignore_errors=True)
