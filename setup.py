"""The wheel's packages, found in the tree rather than listed.

``pyproject.toml``'s ``[tool.setuptools.package-dir]`` maps each top-level folder to its
installed name (``harness/`` → ``kernelwatch.harness``); every folder below one of them is a
package of the wheel, data-only folders (CUDA sources, templates) included, so a new
subpackage ships without being named anywhere. A list kept by hand once left
``kernelwatch.harness.distributed`` out of the wheel while the editable install hid it.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent


def packages() -> list[str]:
    """Every installed package name: each mapped folder and the folders below it."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = []
    for name, folder in mapping["package-dir"].items():
        below = find_namespace_packages(where=str(ROOT / folder), exclude=["*__pycache__*"])
        found += [name, *(f"{name}.{sub}" for sub in below)]
    return sorted(found)


setup(packages=packages())
