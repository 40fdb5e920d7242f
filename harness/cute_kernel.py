"""CuTe DSL kernels in a suite: a spec launches a ``@cute.jit`` function like any kernel.

A spec's ``launch`` calls :meth:`CuteKernel.launch` with torch tensors (and Python scalars).
On a GPU each specialisation (the arguments' dtypes, shapes and strides) is compiled once
with ``cute.compile`` from the tensors' DLPack views and the compiled function is called on
them. On the CPU there is nothing to run it on: the launch raises :class:`KernelUnsupported`,
so its cases are reported ``unsupported`` and the kernel is compile-only (``kernelwatch
build``, which compiles it offline for each target from fake tensors of the recorded shapes:
``harness/build/cute_build.py``). ``nvidia-cutlass-dsl`` is an optional extra
(``kernelwatch[cute]``): this module imports it only to run a kernel on a GPU.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.harness.spec import KernelUnsupported

CPU_REASON = "CuTe DSL kernel: compile-only without a GPU (see kernelwatch build)"
#: torch's dtype names and the CuTe DSL numeric types the build's fake tensors are made of.
CUTE_DTYPES = {
    "torch.float32": "Float32",
    "torch.float16": "Float16",
    "torch.bfloat16": "BFloat16",
    "torch.float8_e4m3fn": "Float8E4M3FN",
    "torch.int32": "Int32",
    "torch.int64": "Int64",
    "torch.uint8": "Uint8",
}


@dataclass(frozen=True)
class CuteKernel:
    """A ``@cute.jit`` host function of a suite module. Its arguments are torch tensors
    (passed as CuTe tensors of the same dtype, shape and strides) and Python scalars."""

    fn: Callable[..., Any]

    @property
    def function(self) -> str:
        return getattr(self.fn, "__qualname__", getattr(self.fn, "__name__", "cute_kernel"))

    @property
    def source(self) -> Path:
        """The file that defines the function (the build compiles it from there)."""
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
        from cutlass.cute.runtime import from_dlpack

        converted = [from_dlpack(a) if hasattr(a, "data_ptr") else a for a in args]
        key = (self.fn, _signature(args))
        compiled = _COMPILED.get(key)
        if compiled is None:  # once per specialisation and process
            import cutlass.cute as cute

            compiled = _COMPILED[key] = cute.compile(self.fn, *converted)
        compiled(*converted)


#: Each function's compiled specialisations in this process.
_COMPILED: dict[tuple[Any, tuple[Any, ...]], Any] = {}


def _signature(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """What a compiled function is specialised on: each tensor's dtype, shape and strides,
    each scalar's type."""
    return tuple(
        (str(a.dtype), tuple(a.shape), a.stride()) if hasattr(a, "data_ptr") else type(a)
        for a in args
    )
