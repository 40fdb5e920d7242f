"""The suite interface: how a kernel repository declares what kernelwatch measures.

A *suite* is any importable Python module with a module-level ``SUITE`` of type :class:`Suite`.
Each :class:`KernelSpec` in it says how to make inputs for a case, how to launch the kernel
under test, how to compute a float64 reference, which stock-library call is the baseline to
beat, which named workloads (lists of cases) exist, and the analytic FLOP / byte model.

This module is the contract between kernelwatch and kernel repositories (``docs/SUITES.md``
documents it). It depends on torch only; nothing here imports Triton, so a suite can be
described before the device is chosen.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelwatch.harness.distributed.bandwidth import COLLECTIVES
from kernelwatch.harness.records import LaunchConfig, default_family

__all__ = [
    "COLLECTIVES",
    "DEFAULT_TOLERANCE",
    "DTYPES",
    "Baseline",
    "Comm",
    "CommBaseline",
    "DistributedSpec",
    "InPlace",
    "KernelSpec",
    "KernelUnsupported",
    "LaunchConfig",
    "Params",
    "Suite",
    "Tensors",
    "World",
    "validate_suite",
]

#: Canonical dtype names used in records, CLI flags and specs. ``fp8`` is e4m3 (``e4m3fn``:
#: no infinities, max 448), the format FP8 inference stores activations and weights in; what
#: a spec does with it (which operands are fp8, what it writes) is the spec's to say.
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    # MXFP4: e2m1 values two a byte with e8m0 scales per 32 (the spec packs them itself).
    "mxfp4": torch.float4_e2m1fn_x2,
}

#: Relative-error tolerances (``||out - ref|| / ||ref||``) when a spec does not override them.
#: About 4x the RMS rounding error of one rounding to the output type: fp16 has an 11-bit
#: significand (RMS error 2^-11/sqrt(3) ~ 2.8e-4), bf16 an 8-bit one (~2.3e-3). There is no
#: default for fp8: its error depends on where the spec rounds to it, so a spec declaring it
#: states its own.
DEFAULT_TOLERANCE: dict[str, float] = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2}

ParamValue = int | float | str | bool
Params = Mapping[str, ParamValue]
Tensors = Mapping[str, torch.Tensor]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class KernelUnsupported(Exception):
    """Raised by a spec's ``launch`` (or ``call``) when this device cannot run the case at
    all (a CUDA C++ kernel on the CPU, a libdevice function the interpreter lacks): the case
    is reported ``unsupported`` with the message as its reason, never as a pass or an
    error."""


@dataclass(frozen=True)
class InPlace:
    """An output the kernel writes into one of its inputs (``KernelSpec.inplace``).

    Before every launch the harness copies ``input`` into a fresh buffer (untimed), which the
    launch receives as that input and as the output. ``overwritten(inputs, params)`` returns
    a boolean mask of the buffer's elements the kernel must write without reading them; they
    are poisoned like any output, so one the kernel skips is reported never written. Without
    it nothing is poisoned (the kernel reads every element it writes).
    """

    input: str
    overwritten: Callable[[Tensors, Params], torch.Tensor] | None = None


@dataclass(frozen=True)
class Baseline:
    """The stock-library call a kernel team must beat (e.g. ``torch.matmul`` -> cuBLAS).

    ``fn(inputs, params)`` returns freshly allocated outputs with the same names as the
    kernel's outputs.
    """

    name: str
    fn: Callable[[Tensors, Params], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class KernelSpec:
    """Everything kernelwatch needs to check, time and model one kernel.

    Callables receive the case's ``params`` (a flat mapping of ints, floats, strings, bools)
    so a spec stays declarative: shapes live in workloads, not in code.

    - ``make_inputs(params, dtype, device, generator)``: fresh random inputs. Floating-point
      tensors must be drawn from ``generator`` (never zeros or constants). Non-contiguous
      views are welcome: they are how strides get tested.
    - ``make_outputs(inputs, params)``: output tensors to be written by the kernel. The
      harness fills them with NaN before every launch, so unwritten elements are caught.
      Integer outputs (indices, routing decisions) are compared with the reference exactly;
      floating-point ones within ``tolerance``.
    - ``launch(inputs, outputs, params, config)``: runs the kernel under test. ``config`` is
      ``None`` to let the kernel choose (autotune or heuristics), or a pinned point of
      ``configs``. Returns the config actually used (block sizes, warps, stages), which
      becomes part of the result's provenance.
    - ``call(inputs, params)``: instead of ``make_outputs`` and ``launch``, the repository's
      own entry point (a host wrapper that allocates its outputs and picks its launch
      config); returns the outputs it allocated by name. The Triton launches it makes are
      observed for the record's config and recorded for the build stage.
    - ``inplace``: outputs the kernel writes into its inputs, by output name (:class:`InPlace`).
      An input a launch writes without being declared here fails the check, saying so.
    - ``constant_inputs``: the inputs constant by design at some shapes (a RoPE table at
      head_dim 2 is ``[cos t, cos t]``), exempt from the refusal of constant tensors.
    - ``reference(inputs, params)``: the expected outputs; called with every floating-point
      input converted to float64.
    - ``family``: the family the dashboards' kernel pickers list the kernel in
      (``attention / paged_decode_attention``); by default the one its name gives
      (:func:`~kernelwatch.harness.records.default_family`), "" for none.
    """

    name: str
    summary: str
    make_inputs: Callable[[Params, torch.dtype, torch.device, torch.Generator], dict[str, Any]]
    make_outputs: Callable[[Tensors, Params], dict[str, torch.Tensor]] | None = field(
        default=None, kw_only=True
    )
    launch: Callable[[Tensors, Tensors, Params, LaunchConfig | None], LaunchConfig] | None = field(
        default=None, kw_only=True
    )
    reference: Callable[[Tensors, Params], dict[str, torch.Tensor]]
    baseline: Baseline
    workloads: Mapping[str, tuple[Params, ...]]
    flops: Callable[[Params], int]
    min_bytes: Callable[[Params, int], int]
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    configs: tuple[LaunchConfig, ...] = ()
    pinned_config: LaunchConfig | None = None
    deterministic: bool = True
    call: Callable[[Tensors, Params], Mapping[str, torch.Tensor]] | None = None
    inplace: Mapping[str, InPlace] = field(default_factory=dict)
    family: str | None = None
    constant_inputs: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        _default_family(self)

    def cases(self, workload: str) -> tuple[Params, ...]:
        """The cases of one named workload; raises ``KeyError`` naming the valid ones."""
        try:
            return self.workloads[workload]
        except KeyError:
            valid = ", ".join(sorted(self.workloads))
            raise KeyError(
                f"kernel {self.name!r} has no workload {workload!r} (has: {valid})"
            ) from None


@dataclass(frozen=True)
class World:
    """The ranks a distributed case runs on: GPUs (on the CPU, processes) per node, and
    nodes. It is read from the case's params (``gpus_per_node``, ``nodes`` default 1), so
    the world size is part of the case's identity like any shape."""

    gpus_per_node: int
    nodes: int = 1

    @property
    def size(self) -> int:
        return self.gpus_per_node * self.nodes

    @classmethod
    def of(cls, params: Params) -> World:
        return cls(int(params["gpus_per_node"]), int(params.get("nodes", 1)))


@dataclass(frozen=True)
class Comm:
    """What one rank's callables are told: its rank, the world, the device it runs on, and
    the process group of the measured backend (NCCL on GPUs, gloo on the CPU)."""

    rank: int
    world: World
    device: torch.device
    group: Any
    backend: str

    @property
    def size(self) -> int:
        return self.world.size


@dataclass(frozen=True)
class CommBaseline:
    """The stock collective a distributed kernel must beat (NCCL's all-reduce beside a
    custom one): ``fn(inputs, params, comm)`` returns freshly allocated outputs."""

    name: str
    fn: Callable[[Tensors, Params, Comm], dict[str, torch.Tensor]]


@dataclass(frozen=True)
class DistributedSpec:
    """A case that runs on several ranks at once: a collective, an all-to-all dispatch, a
    custom communication kernel. The harness starts ``World.of(params).size`` ranks with
    ``torch.distributed`` and calls these on every rank:

    - ``make_inputs(params, dtype, device, generator, rank)``: that rank's random inputs.
      The harness draws every rank's inputs on every rank (each from its own seed), so the
      reference sees them all.
    - ``make_outputs(inputs, params)``: the tensors this rank's launch writes.
    - ``launch(inputs, outputs, params, comm)``: this rank's part of the operation, through
      ``comm.group``; returns the config it used, or None.
    - ``reference(all_inputs, params, rank)``: ``rank``'s expected outputs, from every
      rank's inputs in float64.
    - ``collective`` and ``message_bytes(params, elem)``: the nccl-tests bus-bandwidth
      formula and its byte count S (docs/DISTRIBUTED.md).
    - ``family``: as on :class:`KernelSpec`.
    """

    name: str
    summary: str
    make_inputs: Callable[[Params, torch.dtype, torch.device, torch.Generator, int], dict[str, Any]]
    make_outputs: Callable[[Tensors, Params], dict[str, torch.Tensor]]
    launch: Callable[[Tensors, Tensors, Params, Comm], LaunchConfig | None]
    reference: Callable[[Sequence[Tensors], Params, int], dict[str, torch.Tensor]]
    collective: str
    message_bytes: Callable[[Params, int], int]
    workloads: Mapping[str, tuple[Params, ...]]
    baseline: CommBaseline | None = None
    dtypes: tuple[str, ...] = ("fp32", "fp16", "bf16")
    tolerance: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    deterministic: bool = True
    family: str | None = None

    def __post_init__(self) -> None:
        _default_family(self)

    cases = KernelSpec.cases


def _default_family(spec: KernelSpec | DistributedSpec) -> None:
    # None stands for "not declared": the spec's family is then the one its name gives.
    if spec.family is None:
        object.__setattr__(spec, "family", default_family(spec.name))


@dataclass(frozen=True)
class Suite:
    """A named collection of kernel specs: what a suite module exposes as ``SUITE``."""

    name: str
    kernels: tuple[KernelSpec | DistributedSpec, ...]

    def __post_init__(self) -> None:
        problems = validate_suite(self)
        if problems:
            raise ValueError(f"suite {self.name!r} is malformed: " + "; ".join(problems))

    def kernel(self, name: str) -> KernelSpec | DistributedSpec:
        for spec in self.kernels:
            if spec.name == name:
                return spec
        raise KeyError(name)

    @property
    def names(self) -> list[str]:
        return [spec.name for spec in self.kernels]

    @property
    def workloads(self) -> list[str]:
        return sorted({w for spec in self.kernels for w in spec.workloads})


def validate_suite(suite: Suite) -> list[str]:
    """Every way ``suite`` breaks the interface, as short human-readable problems."""
    problems: list[str] = []
    if not _NAME.match(suite.name):
        problems.append(f"suite name {suite.name!r} must match {_NAME.pattern}")
    if not suite.kernels:
        problems.append("it declares no kernels")
    seen: set[str] = set()
    for spec in suite.kernels:
        if not isinstance(spec, KernelSpec | DistributedSpec):
            problems.append(f"{spec!r} is not a KernelSpec or a DistributedSpec")
            continue
        if spec.name in seen:
            problems.append(f"kernel name {spec.name!r} is declared twice")
        seen.add(spec.name)
        problems.extend(f"kernel {spec.name!r}: {p}" for p in _validate_spec(spec))
    return problems


def _validate_spec(spec: KernelSpec | DistributedSpec) -> list[str]:
    problems = _validate_world(spec) if isinstance(spec, DistributedSpec) else []
    if not _NAME.match(spec.name):
        problems.append(f"name must match {_NAME.pattern}")
    if spec.family and not _NAME.match(spec.family):
        problems.append(f"family {spec.family!r} must be empty or match {_NAME.pattern}")
    unknown = [d for d in spec.dtypes if d not in DTYPES]
    if unknown or not spec.dtypes:
        problems.append(f"dtypes {list(spec.dtypes)} must be a non-empty subset of {list(DTYPES)}")
    missing_tol = [d for d in spec.dtypes if d in DTYPES and d not in spec.tolerance]
    if missing_tol:
        problems.append(f"no tolerance for dtypes {missing_tol}")
    bad_tol = [d for d, t in spec.tolerance.items() if not (math.isfinite(t) and t > 0)]
    if bad_tol:
        problems.append(f"tolerance for {bad_tol} must be a positive finite number")
    if not spec.workloads:
        problems.append("declares no workloads")
    for workload, cases in spec.workloads.items():
        if not _NAME.match(workload):
            problems.append(f"workload name {workload!r} must match {_NAME.pattern}")
        if not cases:
            problems.append(f"workload {workload!r} has no cases")
        for case in cases:
            bad = {k: v for k, v in case.items() if not isinstance(v, ParamValue)}
            if bad:
                problems.append(f"workload {workload!r}: case params {bad} are not scalars")
    if isinstance(spec, KernelSpec):
        problems.extend(_validate_launch(spec))
    return problems


def _validate_launch(spec: KernelSpec) -> list[str]:
    problems = []
    if spec.configs and spec.pinned_config is None:
        problems.append("has autotune configs but no pinned_config for devices that cannot tune")
    if (spec.launch is None) == (spec.call is None):
        problems.append("needs exactly one of launch (with make_outputs) and call")
    elif spec.launch is not None and spec.make_outputs is None and not spec.inplace:
        problems.append("has launch but neither make_outputs nor inplace outputs")
    elif spec.call is not None and (spec.make_outputs is not None or spec.configs):
        problems.append("has call, which allocates its outputs and picks its config itself: "
                        "drop make_outputs and configs")  # fmt: skip
    bad_inplace = [n for n, v in spec.inplace.items() if not isinstance(v, InPlace)]
    if bad_inplace:
        problems.append(f"inplace outputs {bad_inplace} must be InPlace(input=...)")
    return problems


def _validate_world(spec: DistributedSpec) -> list[str]:
    problems = []
    if spec.collective not in COLLECTIVES:
        problems.append(f"collective {spec.collective!r} must be one of {', '.join(COLLECTIVES)}")
    for workload, cases in spec.workloads.items():
        for case in cases:
            world = {k: case.get(k, 1) for k in ("gpus_per_node", "nodes")}
            if "gpus_per_node" not in case or not all(
                type(v) is int and v >= 1 for v in world.values()
            ):
                problems.append(
                    f"workload {workload!r}: case {dict(case)} needs gpus_per_node (and "
                    "optionally nodes) as positive integers"
                )
    return problems
