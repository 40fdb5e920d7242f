"""A content-addressed cache of build results, so a commit that changes one kernel rebuilds
one kernel.

The key is the SHA-256 of everything that decides the compiled code and its analysis: the
kernel's source hash (Triton's hash of the function and every function and constexpr global
it uses; a CUDA file's bytes), the specialisation and compile options, the target, the
toolchain versions and :data:`ANALYSIS_VERSION`. A value is the build record of an ``ok``
compile; failures are not cached, so a transient failure never sticks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from kernelwatch.harness.records import BuildMetrics, RecordError

#: Bump when what is measured from a cubin changes, so older entries are not reused.
ANALYSIS_VERSION = 2
ENV_VAR = "KERNELWATCH_BUILD_CACHE"


def default_cache_dir() -> Path:
    """``$KERNELWATCH_BUILD_CACHE``, else ``$XDG_CACHE_HOME/kernelwatch/build`` (default
    ``~/.cache/kernelwatch/build``)."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelwatch" / "build"


def cache_key(parts: Mapping[str, Any]) -> str:
    """The key of one build: a hash of ``parts`` plus the analysis version."""
    canonical = json.dumps(
        {**parts, "analysis": ANALYSIS_VERSION}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


_KEY = re.compile(r"[0-9a-f]{64}")


class Cache(Protocol):
    """What a build needs of a cache: look a key up, offer a record."""

    def get(self, key: str) -> BuildMetrics | None: ...

    def put(self, key: str, record: BuildMetrics) -> None: ...


class BuildCache:
    """Build records on disk under ``root``, one JSON file per key. Writes are atomic
    (rename), so parallel builders and an interrupted run never leave a torn entry."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        # Keys come from build children, which run kernel code: never a path of their own.
        if not _KEY.fullmatch(key):
            raise ValueError(f"not a build cache key: {key[:80]!r}")
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> BuildMetrics | None:
        """The stored record, or None when absent, unreadable or not a key (then it is
        rebuilt)."""
        try:
            return BuildMetrics.from_json(json.loads(self._path(key).read_text()))
        except (OSError, ValueError, RecordError):
            return None

    def put(self, key: str, record: BuildMetrics) -> None:
        write_whole(self._path(key), record.dumps())


def write_whole(path: Path, text: str) -> None:
    """Write ``path`` by renaming a finished file into place: parallel writers and an
    interrupted run never leave a torn file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
