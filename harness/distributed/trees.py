"""The checkouts a runner's plan imports its suites from, carried to the other nodes of a
multi-node world: pod 0 packs each directory a suite reference names (its root, or a file
suite's directory, and an absolute ``src``), the node agents unpack them and point the plan
at their copies. The agents thus need neither git nor the credentials to fetch the commit,
and import exactly the files pod 0 imports.

What arrives was packed next to kernel code, so it is unpacked with tarfile's ``data``
filter: no absolute paths, no ``..``, no links out of the tree, no devices.
"""

from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path
from typing import Any

from kernelwatch.harness.suite import SuiteRef

#: The plan's keys that hold suite references (``suite_b``: B's side of an A/B run).
SUITE_KEYS = ("suite", "suite_b")


def directories(ref: SuiteRef) -> list[str]:
    """The directories ``ref`` imports from, beside installed packages."""
    if ref.root:
        return [ref.root]
    found = [str(Path(ref.target).parent)] if ref.is_file else []
    return found + ([ref.src] if ref.src and Path(ref.src).is_absolute() else [])


def pack(plan: dict[str, Any]) -> dict[str, str]:
    """Every directory the plan's suites import from, as a base64 gzipped tar by its path
    (``.git`` left out)."""
    packed = {}
    for key in SUITE_KEYS:
        if key in plan:
            for directory in directories(SuiteRef.from_json(plan[key])):
                if directory not in packed:
                    packed[directory] = _tar(Path(directory))
    return packed


def unpack(packed: dict[str, str], into: Path) -> dict[str, str]:
    """Each packed tree unpacked under ``into``; returns where each original path went."""
    moved = {}
    for index, (original, data) in enumerate(sorted(packed.items())):
        target = into / str(index)
        target.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data)), mode="r:gz") as tar:
            tar.extractall(target, filter="data")
        moved[original] = str(target)
    return moved


def relocate(ref: SuiteRef, moved: dict[str, str]) -> SuiteRef:
    """``ref`` with each path under a moved directory pointing into its copy."""

    def move(path: str | None) -> str | None:
        if path is None or not Path(path).is_absolute():
            return path
        for original, copy in moved.items():
            if Path(path).is_relative_to(original):
                return str(Path(copy) / Path(path).relative_to(original))
        return path

    target = move(ref.target) if ref.is_file else ref.target
    return SuiteRef(target or ref.target, move(ref.root), move(ref.src), ref.revision)


def _tar(directory: Path) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(directory, arcname=".", filter=lambda i: None if _in_git(i.name) else i)
    return base64.b64encode(buffer.getvalue()).decode()


def _in_git(name: str) -> bool:
    return ".git" in Path(name).parts
