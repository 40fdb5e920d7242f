"""Find out what a spec compiles, without a GPU, by recording its launches.

The build stage must compile each kernel with the specialisation Triton's JIT would infer for
real shapes (pointer and integer divisibility by 16, integers equal to 1, unit strides), or
the registers and load widths it reports are not the ones that run. Rather than ask spec
authors to restate their signatures, the spec's own ``make_inputs`` and ``launch`` run on
the ``meta`` device (shapes and strides, no memory, so LLM-sized cases cost nothing) while
:func:`recording` stands in for the launchers:

- ``JITFunction.run`` (what ``kernel[grid](...)`` calls) binds the arguments with Triton's
  own binder and keeps the signature, constexprs and ``tt.divisibility`` attributes it infers;
- ``Autotuner.run`` launches every config of its tuning space, so an autotuned kernel is
  built at each config even when its spec declares none;
- ``CudaKernel.launch`` keeps the CUDA C++ entry point and block size;
- ``CuteKernel.launch`` keeps the CuTe DSL function and its arguments' dtypes, shapes and
  strides, from which the build makes the fake tensors it compiles it with.

Each launch also keeps its ``work``: the grid it would run and every argument (a tensor's
shape, strides and dtype; a scalar's value). With the compiled code, that is what a case
runs on the GPU, the case's build identity (``analysis/build_identity.py``).
:func:`host_ops` records what else the host code does on the device between launches.

Nothing is compiled or run while recording; only this child process imports kernel code.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelwatch.harness.cuda_kernel import CudaKernel
from kernelwatch.harness.cute_kernel import CuteKernel
from kernelwatch.harness.records import LaunchConfig

#: Launch keyword arguments that are compile options, not kernel parameters.
_TRITON_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@dataclass(frozen=True)
class TritonLaunch:
    """One ``kernel[grid](...)`` call, as the JIT would have specialised it."""

    fn: Any
    signature: dict[str, str]
    constexprs: dict[tuple[int, ...], Any]
    attrs: dict[tuple[int, ...], Any]
    options: dict[str, Any]
    config: LaunchConfig | None = None
    work: str | None = None

    @property
    def function(self) -> str:
        return self.fn.__name__

    def identity(self) -> str:
        """Everything that decides the compiled code, as stable text. The function's name,
        not its module: a suite file's module name depends on where it is checked out, and the
        cache key adds the source hash."""
        return repr(
            (
                self.fn.fn.__qualname__,
                sorted(self.signature.items()),
                sorted((k, repr(v)) for k, v in self.constexprs.items()),
                sorted((k, repr(v)) for k, v in self.attrs.items()),
                sorted(self.options.items()),
            )
        )


@dataclass(frozen=True)
class CudaLaunch:
    """One :meth:`CudaKernel.launch` call."""

    kernel: CudaKernel
    entry: str
    block: tuple[int, int, int]
    shared_bytes: int
    config: LaunchConfig | None = None
    work: str | None = None

    @property
    def function(self) -> str:
        return self.entry

    def identity(self) -> str:
        # The file's name, not its path: each revision is checked out somewhere else, and the
        # cache key adds the file's content.
        return repr((self.kernel.source.name, self.entry, self.block, self.shared_bytes))


@dataclass(frozen=True)
class CuteLaunch:
    """One :meth:`CuteKernel.launch` call: the function and each argument as the build
    compiles it (a tensor's dtype, shape and strides; a scalar's value)."""

    kernel: CuteKernel
    arguments: tuple[Any, ...]
    config: LaunchConfig | None = None
    work: str | None = None

    @property
    def function(self) -> str:
        return self.kernel.function

    def identity(self) -> str:
        # The function's name, not its file's path (see CudaLaunch); the key adds the file.
        return repr((self.kernel.function, self.arguments))


Launch = TritonLaunch | CudaLaunch | CuteLaunch


@dataclass
class Recorder:
    """The launches seen inside :func:`recording`, in order, and for each its call: its
    position among the host's launch calls (an autotuner's candidates are one call)."""

    launches: list[Launch] = field(default_factory=list)
    calls: list[int] = field(default_factory=list)
    autotune_config: LaunchConfig | None = None
    made: int = 0

    def add(self, launch: Launch) -> None:
        self.launches.append(launch)
        self.calls.append(self.made)
        if self.autotune_config is None:  # inside an autotuner, its run ends the call
            self.made += 1


@contextlib.contextmanager
def recording(capability: int | None = None) -> Iterator[Recorder]:
    """Record launches instead of running them (see the module docstring). With a
    ``capability`` (90 for sm_90a), ``torch.cuda.get_device_capability`` answers it, so a
    host wrapper's architecture-dependent choices are those of that target."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction, create_function_from_signature

    recorder = Recorder()
    # Argument specialisation is the same for every CUDA target; any one backend will do.
    backend = make_backend(GPUTarget("cuda", 90, 32))

    def jit_run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        binder = create_function_from_signature(self.signature, self.params, backend)
        bound, specialization, options = binder(*args, **kwargs)
        _, signature, constexprs, attrs = self._pack_args(
            backend, kwargs, bound, specialization, options
        )
        compile_options = {k: kwargs[k] for k in _TRITON_OPTIONS if kwargs.get(k) is not None}
        recorder.add(
            TritonLaunch(
                self,
                signature,
                constexprs,
                attrs,
                compile_options,
                recorder.autotune_config,
                work(grid, bound),
            )
        )

    def autotuner_run(self: Any, *args: Any, **kwargs: Any) -> None:
        for config in self.configs:
            recorder.autotune_config = LaunchConfig(
                dict(config.kwargs), config.num_warps, config.num_stages
            )
            try:
                self.fn.run(*args, **kwargs, **config.all_kwargs())
            finally:
                recorder.autotune_config = None
        recorder.made += 1

    def cuda_launch(
        self: CudaKernel,
        entry: str,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        args: Any,
        shared_bytes: int = 0,
    ) -> None:
        arguments = dict(enumerate(args)) if isinstance(args, (list, tuple)) else {"args": args}
        recorder.add(
            CudaLaunch(self, entry, tuple(block), shared_bytes, work=work(grid, arguments))
        )

    def cute_launch(self: CuteKernel, *args: Any) -> None:
        arguments = tuple(
            self.specialised(a) if isinstance(a, torch.Tensor) else describe(a) for a in args
        )
        recorder.add(CuteLaunch(self, arguments, work=work((1, 1, 1), dict(enumerate(args)))))

    patches: tuple[tuple[Any, str, Any], ...] = (
        (JITFunction, "run", jit_run),
        (Autotuner, "run", autotuner_run),
        (CudaKernel, "launch", cuda_launch),
        (CuteKernel, "launch", cute_launch),
    )
    if capability is not None:
        target = divmod(capability, 10)
        patches += ((torch.cuda, "get_device_capability", lambda device=None: target),)
    saved = [(cls, name, getattr(cls, name)) for cls, name, _ in patches]
    try:
        for cls, name, replacement in patches:
            setattr(cls, name, replacement)
        yield recorder
    finally:
        for cls, name, original in saved:
            setattr(cls, name, original)


def work(grid: Any, arguments: dict[Any, Any]) -> str | None:
    """The grid (a callable one evaluated as Triton does, on the bound arguments) and every
    argument, as stable text; None when either cannot be described (then the case's
    identity is unknown, and it counts as changed)."""
    try:
        if callable(grid):
            grid = grid(arguments)
        cells = tuple(int(g) for g in grid)
        described = [(str(name), describe(value)) for name, value in arguments.items()]
    except Exception:  # a grid or an argument this recorder cannot read
        return None
    return repr((cells, described))


def describe(value: Any) -> Any:
    """``value`` as what decides a launch's work: a tensor's shape, strides, offset and
    dtype (never its data: there is none on the meta device), a scalar's value, a
    descriptor's fields. ValueError for anything else."""
    if isinstance(value, torch.Tensor):
        return (
            "tensor",
            tuple(value.shape),
            value.stride(),
            value.storage_offset(),
            str(value.dtype),
        )
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return ("float", value.hex())
    if isinstance(value, (torch.dtype, torch.device)):
        return str(value)
    if isinstance(value, (torch.memory_format, torch.layout)):
        return str(value)
    if isinstance(value, (list, tuple)):
        return tuple(describe(v) for v in value)
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(describe(k)), describe(v)) for k, v in value.items())))
    kind = type(value)
    if kind.__module__.startswith("triton"):
        # tl.float16 and friends, constexpr wrappers and tensor descriptors: their fields
        fields = getattr(value, "__dict__", None)
        if fields is None:
            return (kind.__qualname__, repr(value))
        return (kind.__qualname__, tuple((k, describe(v)) for k, v in sorted(fields.items())))
    raise ValueError(f"cannot describe a {kind.__qualname__} argument")


class HostOps(TorchDispatchMode):
    """The device operations a host wrapper runs around its launches (``aten`` ops on the
    meta device). Torch's own kernels (allocation, copies, views, pointwise ops, scatters,
    sorts, reductions) are compiled into torch, so the torch version in the recipe and the
    arguments described here identify what they run. A vendor library's (a matmul, a
    convolution, attention, FFT, linear algebra: cuBLAS, cuDNN and friends pick a kernel at
    run time by heuristics of their own build, which no version here pins) makes
    ``library`` name it, and the case's identity is unknown; so does an op whose arguments
    cannot be described."""

    #: Words in the names of the ops that call a vendor library.
    _LIBRARY = re.compile(
        r"mm|matmul|linear|conv|cudnn|miopen|attention|fft|linalg|cholesky|solve|lstsq|svd"
        r"|eig|\bqr\b|\blu\b|addmv|\bmv\b|dot|\bger\b|_scaled_"
    )

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []
        self.library: str | None = None

    def __torch_dispatch__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None
    ) -> Any:
        kwargs = kwargs or {}
        if self._LIBRARY.search(func.overloadpacket.__name__):
            self.library = self.library or str(func)
        else:
            try:
                self.ops.append(repr((str(func), describe(args), describe(sorted(kwargs.items())))))
            except ValueError:
                self.library = self.library or str(func)
        return func(*args, **kwargs)
