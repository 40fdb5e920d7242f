"""Make Triton's CPU interpreter run kernels the way the GPU compiler does (Triton 3.9).

Two differences would otherwise make every suite author discover a workaround of their own:

- A Python ``float`` kernel argument reaches the kernel as a Python float, where the compiler
  passes an fp32 scalar: ``alpha.to(tl.float32)`` raises ``'float' object has no attribute
  'to'``, and ``x * alpha`` stays fp16 for an fp16 ``x`` instead of promoting to fp32.
  :func:`_scalar_arguments` wraps such a float as the fp32 scalar tensor the GPU sees.
- ``triton.language.extra.libdevice`` is a module of stubs that return None (the compiler
  swaps in the backend's functions), and the backend's ``extern_elementwise`` raises in the
  interpreter. Every libdevice function with a NumPy equivalent (:data:`NUMPY_EQUIVALENTS`)
  is made to compute it; the others still fail, as the case's error.

:func:`patch_interpreter` applies both, once, in a process that runs kernels through the
interpreter (``device.select_device`` calls it); nothing here is used on a GPU.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

#: libdevice functions (by their name without the ``__nv_`` prefix and the ``f`` of the fp32
#: variant) that the interpreter computes with NumPy (``math`` elementwise where NumPy has none).
NUMPY_EQUIVALENTS: dict[str, Callable[..., Any]] = {
    "abs": np.abs,
    "fabs": np.abs,
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atan": np.arctan,
    "atan2": np.arctan2,
    "atanh": np.arctanh,
    "cbrt": np.cbrt,
    "ceil": np.ceil,
    "copysign": np.copysign,
    "cos": np.cos,
    "cosh": np.cosh,
    "erf": np.vectorize(math.erf),
    "erfc": np.vectorize(math.erfc),
    "exp": np.exp,
    "exp2": np.exp2,
    "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1,
    "floor": np.floor,
    "fma": lambda a, b, c: a * b + c,
    "fmax": np.fmax,
    "fmin": np.fmin,
    "fmod": np.fmod,
    "hypot": np.hypot,
    "isinf": np.isinf,
    "lgamma": np.vectorize(math.lgamma),
    "isnan": np.isnan,
    "log": np.log,
    "log10": np.log10,
    "log1p": np.log1p,
    "log2": np.log2,
    "nearbyint": np.rint,
    "pow": np.power,
    "powi": np.power,
    "rcp": np.reciprocal,
    "rint": np.rint,
    "round": lambda x: np.trunc(x + np.copysign(x.dtype.type(0.5), x)),
    "rsqrt": lambda x: np.reciprocal(np.sqrt(x)),
    "sin": np.sin,
    "sinh": np.sinh,
    "sqrt": np.sqrt,
    "tan": np.tan,
    "tanh": np.tanh,
    "tgamma": np.vectorize(math.gamma),
    "trunc": np.trunc,
}


def numpy_equivalent(symbol: str) -> Callable[..., Any] | None:
    """The NumPy function computing the libdevice ``symbol`` (``__nv_tanhf``), or None."""
    name = symbol.removeprefix("__nv_").removeprefix("fast_")
    if name not in NUMPY_EQUIVALENTS and name.endswith("f"):
        name = name[:-1]  # the fp32 variant: __nv_expf; but __nv_erf is erf
    return NUMPY_EQUIVALENTS.get(name)


@functools.cache
def patch_interpreter() -> None:
    """Apply the fixes of the module docstring (once per process). Call it after
    ``TRITON_INTERPRET=1`` is set and before a suite imports its kernels."""
    import triton.language.extra.cuda.libdevice as cuda_libdevice
    import triton.language.extra.libdevice as stubs
    from triton import language as tl
    from triton.runtime import interpreter

    interpreter._implicit_cvt = _scalar_arguments(interpreter._implicit_cvt)
    interpreter.InterpreterBuilder.create_extern_elementwise = _extern_elementwise
    semantic = interpreter.interpreter_semantic
    for name, member in vars(cuda_libdevice).items():
        if tl.core.is_builtin(member):
            computed = _in_interpreter(member, semantic)
            setattr(cuda_libdevice, name, computed)
            if hasattr(stubs, name):
                setattr(stubs, name, computed)


def _scalar_arguments(convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    from triton import language as tl
    from triton.runtime.interpreter import TensorHandle

    def implicit_cvt(arg: Any) -> Any:
        if isinstance(arg, float):
            handle = TensorHandle(np.array([arg], dtype=np.float32), tl.float32)
            return tl.tensor(handle, tl.float32)
        return convert(arg)

    return implicit_cvt


def _extern_elementwise(
    self: Any, lib_name: str, lib_path: str, symbol: str, args: list[Any], ret_type: Any, pure: bool
) -> Any:
    from triton.runtime.interpreter import TensorHandle, _get_np_dtype

    fn = numpy_equivalent(symbol)
    if fn is None:
        raise NotImplementedError(
            f"libdevice {symbol} has no NumPy equivalent in kernelwatch's interpreter set-up; "
            "raise KernelUnsupported for this case on the CPU (docs/SUITES.md)"
        )
    scalar = ret_type.scalar
    with np.errstate(all="ignore"):  # NaN and Inf are results, as on the GPU
        data = np.asarray(fn(*(a.data for a in args)))
    return TensorHandle(data.astype(_get_np_dtype(scalar)), scalar)


def _in_interpreter(builtin: Callable[..., Any], semantic: Any) -> Callable[..., Any]:
    """A libdevice builtin callable from interpreted kernel code, which passes no semantic."""

    @functools.wraps(builtin, updated=())  # not marked a builtin: the semantic is bound here
    def call(*args: Any, **kwargs: Any) -> Any:
        kwargs.pop("_semantic", None)
        return builtin(*args, _semantic=semantic, **kwargs)

    return call
