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
    scalars.

    ``dynamic``: the tensors' layouts are runtime values (``mark_layout_dynamic``: every
    shape and stride but the unit stride of the leading dimension), so one compile serves
    every shape of a dtype, as a CuTe DSL kernel that serves many shapes is written;
    otherwise every shape and stride is compiled in, a compile per shape."""

    fn: Callable[..., Any] | str
    dynamic: bool = False

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

        converted = [self._converted(a, from_dlpack) for a in args]
        key = (self.fn, tuple(self.specialised(a) if hasattr(a, "data_ptr") else (type(a), a)
                              for a in args))  # fmt: skip
        compiled = _COMPILED.get(key)
        if compiled is None:  # once per specialisation and process
            import cutlass.cute as cute

            compiled = _COMPILED[key] = cute.compile(self._resolved(), *converted)
        compiled(*converted)

    def specialised(self, tensor: Any) -> tuple[Any, ...]:
        """What a compile of the function is specialised on, of a tensor argument:
        ``("tensor", dtype, shape, strides)``, a dynamic layout's sizes and strides None but
        the leading dimension's unit stride. The build compiles the same
        (``harness/build/cute_build.py``); a scalar is compiled in by value where it is a
        ``cutlass.Constexpr``."""
        shape, stride = tuple(tensor.shape), tuple(tensor.stride())
        if self.dynamic:
            lead = leading_dim(stride)
            shape = (None,) * len(shape)
            stride = tuple(1 if i == lead else None for i in range(len(stride)))
        return ("tensor", str(tensor.dtype), shape, stride)

    def _converted(self, value: Any, from_dlpack: Callable[[Any], Any]) -> Any:
        if not hasattr(value, "data_ptr"):
            return value
        tensor = from_dlpack(value)
        if self.dynamic:
            tensor = tensor.mark_layout_dynamic(leading_dim(tuple(value.stride())))
        return tensor

    def _resolved(self) -> Callable[..., Any]:
        if not isinstance(self.fn, str):
            return self.fn
        module, _, name = self.fn.partition(":")
        return getattr(importlib.import_module(module), name)


_NAMED = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
#: Each function's compiled specialisations in this process.
_COMPILED: dict[tuple[Any, tuple[Any, ...]], Any] = {}


def leading_dim(stride: tuple[int, ...]) -> int | None:
    """The dimension a dynamic layout keeps the unit stride of: the last one of stride 1, or
    None (every stride dynamic). Named, not left to the DSL, whose own choice refuses two
    unit strides of size over 1 and takes a row of one element (strides ``(1, 1)``) for a
    column: this way a ``(tokens, 1)`` output shares the compile of every other width."""
    return max((i for i, step in enumerate(stride) if step == 1), default=None)
