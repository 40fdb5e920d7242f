"""Check one kernel case against its float64 reference.

Each case gets fresh random inputs from a seed derived from its identity, runs the kernel
twice into outputs poisoned with two different values (NaN, then a finite sentinel), and
compares. The two poisons make three failure modes distinguishable that a single launch would
blur: elements never written (NaN in run one *and* the sentinel in run two), elements the
kernel computed as NaN/Inf, and results that change between identical launches. Integer
outputs, which hold no NaN, are poisoned with their type's minimum instead, and must equal
the reference exactly: an index or a routing decision is right or wrong, never close.
"""

from __future__ import annotations

import hashlib
import time
import traceback
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace

import torch

from kernelwatch.harness import launcher
from kernelwatch.harness.device import Device, software_info
from kernelwatch.harness.records import CaseId, CorrectnessResult, LaunchConfig, SoftwareInfo
from kernelwatch.harness.spec import DTYPES, KernelSpec, KernelUnsupported, Params

#: Finite poison for the second launch; exactly representable in fp16, bf16 and fp32 (fp8
#: e4m3 saturates it to -448, still finite and still a poison).
SENTINEL = -7168.0


@dataclass(frozen=True)
class Comparison:
    """How one launch's outputs compare with the reference: the pure part of a check."""

    rel_error: float | None
    max_abs_error: float | None
    nonfinite: int
    unwritten: int
    differing: int
    failures: tuple[str, ...]


def case_seed(seed: int, case: CaseId) -> int:
    """A per-case seed: the same case always sees the same inputs for a given run seed, and
    different cases never share them."""
    digest = hashlib.sha256(f"{seed}:{case.key()}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def compare(
    first: Mapping[str, torch.Tensor],
    second: Mapping[str, torch.Tensor],
    reference: Mapping[str, torch.Tensor],
    tolerance: float,
    expect_deterministic: bool = True,
) -> Comparison:
    """Compare two launches (NaN-poisoned, then SENTINEL-poisoned) with the reference.

    ``rel_error`` is the worst ``||out - ref|| / ||ref||`` over outputs (the absolute norm
    where the reference is all zeros); it and ``max_abs_error`` are ``None`` when an output is
    not finite, because a number computed from NaN would read like a measurement.
    """
    if not reference:
        raise ValueError(
            "the spec's reference returns no outputs: a check with nothing to compare would "
            "pass whatever the kernel does"
        )
    if set(first) != set(reference):
        raise ValueError(
            f"the spec's reference returns {sorted(reference)} but the kernel writes "
            f"{sorted(first)}: make the output names match"
        )
    failures: list[str] = []
    worst_rel, worst_abs = 0.0, 0.0
    nonfinite = unwritten = differing = 0
    finite_everywhere = True
    for name in sorted(first):
        out, again = first[name], second[name]
        ref = reference[name].to(torch.float64)
        if out.shape != ref.shape:
            raise ValueError(
                f"output {name!r} has shape {tuple(out.shape)}, reference has {tuple(ref.shape)}"
            )
        unwritten_first, unwritten_second = poisons(out.dtype)
        holes = _same(out, unwritten_first) & (again == unwritten_second)
        exact = not out.dtype.is_floating_point
        if out.dtype.itemsize == 1 and not exact:
            # fp8 lacks most CPU ops; every fp8 value is exact in fp32.
            out, again = out.float(), again.float()
        bad = ~torch.isfinite(out) & ~holes
        n_holes, n_bad = int(holes.sum()), int(bad.sum())
        if n_holes:
            first_hole = tuple(int(i) for i in holes.nonzero()[0])
            failures.append(
                f"{n_holes} of {out.numel()} elements of {name!r} never written "
                f"(first at index {first_hole})"
            )
        if n_bad:
            failures.append(f"{n_bad} of {out.numel()} elements of {name!r} are NaN/Inf")
        unwritten += n_holes
        nonfinite += n_bad
        if n_holes or n_bad:
            finite_everywhere = False
            continue
        diff = out.to(torch.float64) - ref
        ref_norm = float(torch.linalg.vector_norm(ref))
        err_norm = float(torch.linalg.vector_norm(diff))
        rel = err_norm / ref_norm if ref_norm > 0 else err_norm
        max_abs = float(diff.abs().max()) if diff.numel() else 0.0
        if exact:
            wrong = diff != 0
            if bool(wrong.any()):
                first_wrong = tuple(int(i) for i in wrong.nonzero()[0])
                failures.append(
                    f"{int(wrong.sum())} of {out.numel()} elements of {name!r} differ from the "
                    f"reference (first at index {first_wrong}); integer outputs must match exactly"
                )
        elif rel > tolerance:
            failures.append(f"{name!r} relative error {rel:.3g} exceeds tolerance {tolerance:.3g}")
        worst_rel, worst_abs = max(worst_rel, rel), max(worst_abs, max_abs)
        n_diff = _bitwise_differences(out, again)
        differing += n_diff
        if n_diff and expect_deterministic:
            failures.append(
                f"nondeterministic: two launches on the same inputs differ in {n_diff} "
                f"elements of {name!r}"
            )
    return Comparison(
        rel_error=worst_rel if finite_everywhere else None,
        max_abs_error=worst_abs if finite_everywhere else None,
        nonfinite=nonfinite,
        unwritten=unwritten,
        differing=differing,
        failures=tuple(failures),
    )


def poisons(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The values an output of ``dtype`` is filled with before the first and the second
    launch: NaN and :data:`SENTINEL` (as ``dtype`` rounds it) for floating point, the type's
    minimum and the sentinel for integers."""
    if dtype.is_floating_point:
        first = torch.tensor(float("nan"), dtype=dtype)
    else:
        first = torch.tensor(torch.iinfo(dtype).min, dtype=dtype)
    return first, torch.tensor(SENTINEL).to(dtype)


def _same(values: torch.Tensor, poison: torch.Tensor) -> torch.Tensor:
    return torch.isnan(values) if poison.isnan() else values == poison


def _bitwise_differences(a: torch.Tensor, b: torch.Tensor) -> int:
    if a.dtype.is_floating_point:
        bits = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        a, b = a.contiguous().view(bits), b.contiguous().view(bits)
    return int((a != b).sum())


def check_case(
    spec: KernelSpec,
    suite: str,
    workload: str,
    params: Params,
    dtype: str,
    device: Device,
    seed: int = 0,
    software: SoftwareInfo | None = None,
    pin: LaunchConfig | None = None,
) -> CorrectnessResult:
    """Run one case and return its verdict; never raises for a kernel's own failure.
    ``pin`` is launched instead of letting the kernel choose (a pin file's config); the
    record's ``config`` is the one verified, which bench then times."""
    case = CaseId(suite, spec.name, workload, dict(params), dtype)
    base = {
        "case": case,
        "tolerance": spec.tolerance[dtype],
        "seed": seed,
        "device": device.info,
        "software": software or software_info(),
    }
    if dtype in device.unsupported_dtypes:
        reason = f"unsupported on {device.info.kind}: {device.unsupported_dtypes[dtype]}"
        return CorrectnessResult(verdict="unsupported", reason=reason, **base)
    start = time.perf_counter()
    config: LaunchConfig | None = None
    try:
        generator = torch.Generator(device=device.torch_device)
        generator.manual_seed(case_seed(seed, case))
        torch_dtype = DTYPES[dtype]
        inputs = spec.make_inputs(params, torch_dtype, torch.device(device.torch_device), generator)
        _require_random(inputs, spec.constant_inputs)
        reference = spec.reference(_to_float64(inputs), params)
        pinned = pin if pin is not None or device.can_autotune else spec.pinned_config
        before = _snapshot(inputs)
        first, config = _launch(spec, inputs, params, pinned, 0, device)
        written = _written_in_place(inputs, before)
        # The second launch reuses the first one's config so that autotuning cannot pass for
        # nondeterminism, and the inputs as they were made: a launch that wrote them is told
        # apart from a nondeterministic one.
        _restore(inputs, before)
        second, _ = _launch(spec, inputs, params, config, 1, device)
        result = compare(first, second, reference, spec.tolerance[dtype], spec.deterministic)
        result = replace(result, failures=(*written, *result.failures))
    except KernelUnsupported as exc:
        return CorrectnessResult(verdict="unsupported", reason=str(exc), **base)
    except Exception as exc:  # a kernel's failure is a verdict, not a crash of the harness
        message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
        return CorrectnessResult(
            verdict="error",
            reason=message[:500],
            config=config,
            duration_s=time.perf_counter() - start,
            detail="".join(traceback.format_exc(limit=8))[-4000:],
            **base,
        )
    return CorrectnessResult(
        verdict="fail" if result.failures else "pass",
        reason="; ".join(result.failures),
        rel_error=result.rel_error,
        max_abs_error=result.max_abs_error,
        nonfinite=result.nonfinite,
        unwritten=result.unwritten,
        deterministic=result.differing == 0 if result.unwritten == 0 else None,
        config=config,
        duration_s=time.perf_counter() - start,
        **base,
    )


def _launch(
    spec: KernelSpec,
    inputs: Mapping[str, torch.Tensor],
    params: Params,
    config: LaunchConfig | None,
    run: int,
    device: Device,
) -> tuple[dict[str, torch.Tensor], LaunchConfig]:
    bound = launcher.bind(spec, inputs, params, lambda dtype: poisons(dtype)[run].item())
    with _poisoned_scratch():
        outputs, used = launcher.launch(spec, bound, params, config)
        device.synchronize()
    return {name: out.detach().clone() for name, out in outputs.items()}, used


@contextmanager
def _poisoned_scratch() -> Iterator[None]:
    """Scratch tensors a kernel allocates itself (a MoE's sorted rows, split-K partials) start
    as NaN or the integer maximum, as PyTorch's deterministic mode fills them: otherwise an
    allocator handing back the previous launch's memory, holding the right values, hides a
    row the kernel forgot to write."""
    # set_deterministic_debug_mode, not use_deterministic_algorithms: the latter also sets
    # Inductor's flag, and importing Inductor (and Dynamo with it) cost each check's child
    # 2.3 s of CPU for a flag nothing here reads.
    before = (
        torch.get_deterministic_debug_mode(),
        torch.utils.deterministic.fill_uninitialized_memory,
    )
    torch.set_deterministic_debug_mode("warn")
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            # Only the filling is wanted here, not warnings about nondeterministic ops.
            warnings.filterwarnings("ignore", message=".*deterministic.*")
            yield
    finally:
        torch.set_deterministic_debug_mode(before[0])
        torch.utils.deterministic.fill_uninitialized_memory = before[1]


def _to_float64(inputs: Mapping[str, object]) -> dict[str, object]:
    return {
        name: value.to(torch.float64)
        if isinstance(value, torch.Tensor) and value.is_floating_point()
        else value
        for name, value in inputs.items()
    }


def _require_random(inputs: Mapping[str, object], exempt: frozenset[str]) -> None:
    """Constant inputs hide whole classes of bugs (a missing stride, a swapped operand)."""
    for name, value in inputs.items():
        if name in exempt:
            continue
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel() > 1:
            flat = value.reshape(-1)
            if bool((flat == flat[0]).all()):
                raise ValueError(
                    f"the spec's make_inputs returned a constant tensor {name!r}; "
                    "draw inputs from the generator it is given, or name it in the spec's "
                    "constant_inputs when it is constant by design"
                )


def _snapshot(inputs: Mapping[str, object]) -> dict[str, torch.Tensor]:
    return {n: v.clone() for n, v in inputs.items() if isinstance(v, torch.Tensor)}


def _written_in_place(
    inputs: Mapping[str, object], before: Mapping[str, torch.Tensor]
) -> tuple[str, ...]:
    """What a launch wrote into the inputs it was given (declared in-place outputs get
    copies, so any change is undeclared): the caller's tensors would come back changed."""
    written = []
    for name, was in before.items():
        now = inputs[name]
        assert isinstance(now, torch.Tensor)
        n = _bitwise_differences(now, was)
        if n:
            written.append(
                f"the launch wrote input {name!r} in place ({n} of {was.numel()} elements "
                "changed): declare it in the spec's inplace, or have the entry point work on "
                "a copy"
            )
    return tuple(written)


def _restore(inputs: Mapping[str, object], before: Mapping[str, torch.Tensor]) -> None:
    for name, was in before.items():
        now = inputs[name]
        assert isinstance(now, torch.Tensor)
        now.copy_(was)
