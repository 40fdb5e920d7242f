"""CuTe DSL kernels in a suite: a spec launches a ``@cute.jit`` function like any kernel.

A spec's ``launch`` calls :meth:`CuteKernel.launch` with torch tensors (and Python scalars).
On a GPU each specialisation (the arguments' dtypes, shapes and strides) is compiled once
with ``cute.compile`` from the tensors' DLPack views and the compiled function is called on
them. On the CPU there is nothing to run it on: the launch raises :class:`KernelUnsupported`,
so its cases are reported ``unsupported`` and the kernel is compile-only (``kernelwatch
build``, which compiles it offline for each target from fake tensors of the recorded shapes:
``harness/build/cute_build.py``). ``nvidia-cutlass-dsl`` is an optional extra
(``kernelwatch[cute]``): this module imports it only to run a kernel on a GPU.

A suite that must import without the DSL (the built-in one) names its function instead of
importing it: ``CuteKernel("package.module:function")``. The module is imported on the first
launch on a GPU; the build finds its file without running it, and the build memo keys the
spec's kernel by that module (``harness/build/memo.py`` reads the name from the call).
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.harness.spec import KernelUnsupported

CPU_REASON = "CuTe DSL kernel: compile-only without a GPU (see kernelwatch build)"
#: Why a GPU host without the optional extra reports a CuTe DSL case unsupported.
ABSENT_REASON = (
    "CuTe DSL kernel: nvidia-cutlass-dsl is not installed (pip install 'kernelwatch[cute]')"
)


@dataclass(frozen=True)
class CuteKernel:
    """A ``@cute.jit`` host function of a suite module, or its name as
    ``"package.module:function"`` (imported on the first launch). Its arguments are torch
    tensors (passed as CuTe tensors of the same dtype, shape and strides) and Python
    scalars."""

    fn: Callable[..., Any] | str

    def __post_init__(self) -> None:
        if isinstance(self.fn, str) and not _NAMED.fullmatch(self.fn):
            raise ValueError(
                f"CuteKernel({self.fn!r}): name the function as 'package.module:function'"
            )

    @property
    def function(self) -> str:
        if isinstance(self.fn, str):
            return self.fn.partition(":")[2]
        return getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", "cute_kernel"))

    @property
    def source(self) -> Path:
        """The file that defines the function (the build compiles it from there)."""
        if isinstance(self.fn, str):
            module = self.fn.partition(":")[0]
            found = importlib.util.find_spec(module)  # imports its packages, not the module
            if found is None or found.origin is None:
                raise ValueError(f"{self.fn}: no module {module} to compile the kernel from")
            return Path(found.origin).resolve()
        original = inspect.unwrap(self.fn)
        path = inspect.getsourcefile(original)
        if path is None:
            raise ValueError(f"{self.function}: a CuTe DSL kernel must be defined in a file")
        return Path(path).resolve()

    def launch(self, *args: Any) -> None:
        """Run the function on ``args`` on the GPU the tensor arguments live on."""
        devices = {a.device.type for a in args if hasattr(a, "data_ptr")}
        if devices != {"cuda"}:
            raise KernelUnsupported(CPU_REASON)
        if importlib.util.find_spec("cutlass") is None:
            raise KernelUnsupported(ABSENT_REASON)
        from cutlass.cute.runtime import from_dlpack

        converted = [from_dlpack(a) if hasattr(a, "data_ptr") else a for a in args]
        key = (self.fn, _signature(args))
        compiled = _COMPILED.get(key)
        if compiled is None:  # once per specialisation and process
            import cutlass.cute as cute

            compiled = _COMPILED[key] = cute.compile(self._resolved(), *converted)
        compiled(*converted)

    def _resolved(self) -> Callable[..., Any]:
        if not isinstance(self.fn, str):
            return self.fn
        module, _, name = self.fn.partition(":")
        return getattr(importlib.import_module(module), name)


_NAMED = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Each function's compiled specialisations in this process.
_COMPILED: dict[tuple[Any, tuple[Any, ...]], Any] = {}


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a compiled function is specialised on: each tensor's dtype, shape and strides,
    each scalar's type and value (a ``cutlass.Constexpr`` argument is compiled in)."""
    return tuple(
        (str(a.dtype), tuple(a.shape), a.stride()) if hasattr(a, "data_ptr") else (type(a), a)
        for a in args
    )
