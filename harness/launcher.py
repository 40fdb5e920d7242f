"""How the harness launches one case of a spec, the same way in the check, the timing and the
build stage.

- The outputs are prepared before the launch, outside anything timed: ``make_outputs``'s
  tensors, and for each in-place output (``KernelSpec.inplace``) a fresh copy of its input,
  with the same strides, which the launch receives in place of that input. Poisoning fills
  the outputs, and of an in-place output only the elements the kernel must overwrite.
- A spec with ``call`` launches through the repository's own entry point (a host wrapper
  that allocates its outputs and chooses block sizes and warps itself). Its Triton launches
  are observed as they pass, so the record names the config the wrapper chose; a call that
  launches no Triton kernel at all (a wrapper falling back to another path on this device)
  is an error, not a pass of code that never ran.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelwatch.harness.cuda_kernel import CudaKernel
from kernelwatch.harness.records import LaunchConfig
from kernelwatch.harness.spec import KernelSpec, Params

#: What Triton's CUDA backend uses when a launch passes no ``num_warps`` / ``num_stages``.
TRITON_DEFAULT_WARPS, TRITON_DEFAULT_STAGES = 4, 3


@dataclass(frozen=True)
class Bound:
    """A case's tensors ready for one launch: ``inputs`` with each in-place input replaced by
    its output buffer, and the ``outputs`` prepared so far (an entry point adds its own)."""

    inputs: Mapping[str, Any]
    outputs: Mapping[str, torch.Tensor]


def bind(
    spec: KernelSpec,
    inputs: Mapping[str, Any],
    params: Params,
    poison: Callable[[torch.dtype], float | int] | None = None,
) -> Bound:
    """Prepare the outputs of one launch of ``spec`` on ``inputs``, each poisoned with the
    value ``poison`` gives for its dtype (None: left as made). ``inputs`` themselves are never
    written."""
    outputs = dict(spec.make_outputs(inputs, params)) if spec.make_outputs is not None else {}
    if poison is not None:
        for out in outputs.values():
            out.fill_(poison(out.dtype))
    launched = dict(inputs)
    for name, inplace in spec.inplace.items():
        if name in outputs:
            raise ValueError(f"output {name!r} is both made by make_outputs and in place")
        source = inputs[inplace.input]
        buffer = torch.empty_strided(
            source.size(), source.stride(), dtype=source.dtype, device=source.device
        ).copy_(source)
        if poison is not None and inplace.overwritten is not None:
            buffer[inplace.overwritten(inputs, params)] = poison(buffer.dtype)
        launched[inplace.input] = outputs[name] = buffer
    return Bound(launched, outputs)


def launch(
    spec: KernelSpec, bound: Bound, params: Params, config: LaunchConfig | None
) -> tuple[dict[str, torch.Tensor], LaunchConfig]:
    """Launch once: every output it wrote, and the config it used."""
    if spec.call is None:
        assert spec.launch is not None
        used = spec.launch(bound.inputs, bound.outputs, params, config)
        return dict(bound.outputs), used
    with observing() as seen:
        returned = spec.call(bound.inputs, params)
    return {**bound.outputs, **returned}, seen.config()


def repeat(
    spec: KernelSpec, bound: Bound, params: Params, config: LaunchConfig
) -> Callable[[], object]:
    """A zero-argument launch repeating ``config`` on the same tensors: what is timed."""
    if spec.call is None:
        assert spec.launch is not None
        run = spec.launch
        return lambda: run(bound.inputs, bound.outputs, params, config)
    call = spec.call
    return lambda: call(bound.inputs, params)


@dataclass
class Observed:
    """The launches seen inside :func:`observing`: each Triton kernel's constexprs and
    compile options as the caller passed them (``launches``), and the GPU function of every
    launch, Triton's and CUDA C++'s, in order (``functions``: what a profiler names them,
    which the self-check's traced step matches)."""

    launches: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    functions: list[str] = field(default_factory=list)

    def config(self) -> LaunchConfig:
        """The first launch's config (its integer constexprs, warps and stages)."""
        if not self.launches:
            raise RuntimeError(
                "the spec's call launched no Triton kernel: its entry point took another "
                "path on this device, so there is nothing of the kernel's to check or time"
            )
        _, arguments = self.launches[0]
        meta = {
            k: v
            for k, v in arguments.items()
            if isinstance(v, int) and not isinstance(v, bool) and k not in _OPTIONS
        }
        return LaunchConfig(
            meta,
            arguments.get("num_warps") or TRITON_DEFAULT_WARPS,
            arguments.get("num_stages") or TRITON_DEFAULT_STAGES,
        )


_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")


@contextlib.contextmanager
def observing() -> Iterator[Observed]:
    """Observe Triton launches (compiled or interpreted) and CUDA C++ ones while letting them
    run."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    observed = Observed()
    saved = [(cls, cls.run) for cls in (JITFunction, InterpretedFunction)]
    cuda_launch = CudaKernel.launch

    def watch(original: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup"):
                observed.launches.append((self.fn.__name__, _constexprs(self, args, kwargs)))
                observed.functions.append(self.fn.__name__)
            return original(self, *args, **kwargs)

        return run

    def cuda(self: CudaKernel, entry: str, *args: Any, **kwargs: Any) -> None:
        observed.functions.append(entry)
        cuda_launch(self, entry, *args, **kwargs)

    try:
        for cls, original in saved:
            cls.run = watch(original)
        CudaKernel.launch = cuda  # type: ignore[method-assign]
        yield observed
    finally:
        for cls, original in saved:
            cls.run = original
        CudaKernel.launch = cuda_launch  # type: ignore[method-assign]


def _constexprs(kernel: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    from triton.runtime.jit import _normalize_ty

    signature = inspect.signature(kernel.fn)
    annotations = inspect.get_annotations(kernel.fn)
    constexpr = {n for n, ty in annotations.items() if _normalize_ty(ty) == "constexpr"}
    bound = signature.bind_partial(*args, **{k: v for k, v in kwargs.items() if k in constexpr})
    options = {k: kwargs[k] for k in _OPTIONS if kwargs.get(k) is not None}
    return {**{k: v for k, v in bound.arguments.items() if k in constexpr}, **options}
