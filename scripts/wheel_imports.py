"""Import every module of kernelwatch's tree from an installed copy, and fail on the first
that is missing or that Python found anywhere but there.

The tree (the folders pyproject.toml maps to ``kernelwatch.*``, all of which ``setup.py``
packages) says which modules there must be, so a package the build left out fails here
instead of on a GPU host. Usage: ``python scripts/wheel_imports.py SITE [ROOT]``: SITE is
where the wheel was installed (a venv's site-packages, or ``pip install --target``'s
folder), ROOT the source tree (default: this script's repository). Exit 0 with one line
counting the modules, 1 with a line for each that failed.
"""

from __future__ import annotations

import importlib
import sys
import tomllib
import traceback
from pathlib import Path

# Run by Alembic (env.py) or by ``python -m`` (__main__.py), never imported: importing either
# runs it. They must still be in the wheel, which the file check below asserts.
NOT_IMPORTED = frozenset({"kernelwatch.store.migrations.env", "kernelwatch.cli.__main__"})
# The modules the optional extras (pyproject.toml's optional-dependencies) install, by the
# name they are imported as, with the extra: a tree module that needs one that is not
# installed is named, not failed (the built-in CuTe DSL kernels need kernelwatch[cute]).
OPTIONAL = {"cutlass": "kernelwatch[cute]"}


def tree_modules(root: Path) -> list[str]:
    """Every module of the source tree under the names the wheel installs them as."""
    mapping = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    names = []
    for package, folder in mapping["package-dir"].items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join((package, *parts)))
    return names


def check(site: Path, root: Path, optional: list[str] | None = None) -> list[str]:
    """The problems found importing every tree module from ``site``: none means all is well.
    A module that needs an optional extra not installed here is added to ``optional``."""
    site = site.resolve()
    problems = []
    for name in tree_modules(root):
        relative = Path(*name.split(".")[1:])
        wanted = [
            site / "kernelwatch" / relative / "__init__.py",
            site / "kernelwatch" / f"{relative}.py",
        ]
        if not any(path.is_file() for path in wanted):
            problems.append(f"{name}: not in the installed copy")
            continue
        if name in NOT_IMPORTED:
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:
            missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
            extra = OPTIONAL.get((missing or "").partition(".")[0])
            if extra is not None and optional is not None:
                optional.append(f"{name} ({extra})")
                continue
            last = traceback.format_exception_only(exc)[-1].strip()
            problems.append(f"{name}: {last}")
            continue
        found = Path(module.__file__ or "").resolve()
        if not found.is_relative_to(site):
            problems.append(f"{name}: imported from {found}, not from {site}")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print("usage: wheel_imports.py SITE [ROOT]", file=sys.stderr)
        return 2
    site = Path(argv[0])
    root = Path(argv[1]) if len(argv) == 2 else Path(__file__).resolve().parent.parent
    optional: list[str] = []
    problems = check(site, root, optional)
    for line in problems:
        print(f"wheel_imports: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"wheel_imports: {len(tree_modules(root)) - len(optional)} modules import from {site}")
    if optional:
        print(f"wheel_imports: not imported, an optional extra is missing: {', '.join(optional)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
