"""Planted bugs in the built-in serving kernels, made by editing a copy of their source.

A mutant is a built-in kernel module with one line changed the way a real bug would change
it (a wrong expert, a dropped token, a scale from the wrong block...). The copy is written to
a temporary directory and imported from there, so Triton sees a real source file and the
kernels under test keep their exact code but for the planted line. A mutation whose line is
no longer in the module fails loudly instead of passing unmutated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


@dataclass(frozen=True)
class Mutation:
    """``old`` -> ``new`` in ``kernelwatch.kernels.<module>``; ``bug`` says what it plants."""

    module: str
    old: str
    new: str
    bug: str


def mutant_source(mutation: Mutation) -> str:
    """The module's source with the mutation applied (``old`` must occur exactly once)."""
    original = importlib.import_module(f"kernelwatch.kernels.{mutation.module}")
    source = inspect.getsource(original)
    count = source.count(mutation.old)
    if count != 1:
        raise AssertionError(
            f"planted bug {mutation.bug!r}: {mutation.old!r} occurs {count} times in "
            f"kernels/{mutation.module}.py; update the mutation to the code"
        )
    return source.replace(mutation.old, mutation.new)


def load_mutant(mutation: Mutation, directory: Path) -> ModuleType:
    """Import the mutated module from a file in ``directory``."""
    digest = hashlib.sha256(repr(mutation).encode()).hexdigest()[:10]
    name = f"kw_mutant_{mutation.module}_{digest}"
    path = directory / f"{name}.py"
    path.write_text(mutant_source(mutation))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
