"""Importing a kernel library's kernels without the rest of its package, for a suite.

Kernel libraries usually live inside a bigger package (vLLM, SGLang, a fine-tuning
library): importing ``pkg.kernels.rms_norm`` runs ``pkg/__init__.py`` first, which imports
the whole training or serving stack and may refuse to start without a GPU. A suite imports
its kernel modules with :func:`kernel_module` instead: the packages above the module are
entered as namespace packages (their folder, not their ``__init__``), so only the kernel
module and what it imports itself run. What the kernel module itself needs and the CPU
image lacks (an optional accelerator library) can be stood in for with
:func:`stub_modules`, and a dependency missing otherwise is named in one line.

Both only touch ``sys.modules`` and ``sys.meta_path``; the A/B child forgets what a suite
entered this way when it forgets the suite's checkout (``suite.load_suite_isolated``), so
side B never sees side A's.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class KernelImportError(ImportError):
    """A kernel module that cannot be imported, saying which dependency is missing."""


def kernel_module(path: str) -> types.ModuleType:
    """Import the kernel module at ``path`` (``/``-separated, relative to a directory on
    ``sys.path``: the checkout, or its source root) under its dotted name, without running
    the ``__init__.py`` of any package above it. Relative imports inside the kernels' own
    package work; a missing dependency raises :class:`KernelImportError` naming it."""
    relative = Path(path)
    if relative.is_absolute() or relative.suffix != ".py":
        raise KernelImportError(
            f"kernel_module({path!r}): give a .py file relative to the checkout"
        )
    root = next((Path(p) for p in sys.path if p and (Path(p) / relative).is_file()), None)
    if root is None:
        raise KernelImportError(f"kernel_module({path!r}): no such file on sys.path")
    parts = relative.with_suffix("").parts
    for depth in range(1, len(parts)):
        _enter_namespace(".".join(parts[:depth]), root.joinpath(*parts[:depth]))
    name = ".".join(parts)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name == name:
            raise
        raise KernelImportError(
            f"{path} imports {exc.name!r}, which is not installed here: install it, or stand "
            f"in for it with stub_modules({exc.name.partition('.')[0]!r}) before kernel_module "
            "(docs/SUITES.md)"
        ) from exc


def stub_modules(*names: str) -> tuple[str, ...]:
    """Stand in for each top-level module of ``names`` that cannot be imported here (an
    accelerator library a CPU image lacks): it and any submodule import, and every attribute
    is a placeholder that calls through as a decorator and is otherwise inert. Modules that
    are installed are left alone. Returns the names stubbed."""
    stubbed = tuple(
        n for n in names if n not in sys.modules and importlib.util.find_spec(n) is None
    )
    if stubbed:
        sys.meta_path.insert(0, _StubFinder(frozenset(stubbed)))
    for name in stubbed:
        importlib.import_module(name)
    return stubbed


def _enter_namespace(name: str, folder: Path) -> None:
    if name in sys.modules:
        return
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


class _Placeholder:
    """Whatever a stubbed module's attribute is: a decorator that returns what it decorates,
    a callable, an attribute holder, a base class; never a value a kernel computes with."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attribute: str) -> _Placeholder:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Placeholder(f"{self._name}.{attribute}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        return _Placeholder(f"{self._name}()")

    def __getitem__(self, key: Any) -> _Placeholder:
        return _Placeholder(f"{self._name}[]")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"


class _StubModule(types.ModuleType):
    def __getattr__(self, attribute: str) -> _Placeholder:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        return _Placeholder(f"{self.__name__}.{attribute}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.partition(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None
