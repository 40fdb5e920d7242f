"""Turn a suite into the list of builds: kernel x dtype x config x specialisation x arch,
and each case into its recipe: what it launches, in order, and on what.

Runs in the build child (it launches spec code on the meta device, see ``capture.py``). The
list is deterministic, so several children agree on it and each takes its share by index.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import traceback
import types
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, NamedTuple

import torch

from kernelwatch.harness import launcher
from kernelwatch.harness.build.archs import ARCHS
from kernelwatch.harness.build.capture import HostOps, Launch, describe, recording
from kernelwatch.harness.build.keys import language_of, launch_key
from kernelwatch.harness.records import BuildMetrics, CaseId, CaseRecipe, LaunchConfig, LaunchStep
from kernelwatch.harness.spec import DTYPES, KernelSpec, KernelUnsupported, Suite


@dataclass(frozen=True)
class Job:
    """One compile: a recorded launch for one target, and where it came from."""

    kernel: str
    dtype: str
    workload: str
    case: str
    config: LaunchConfig | None
    launch: Launch
    arch: str
    launch_index: int = 0

    def skeleton(self, suite: str) -> BuildMetrics:
        """The record's identity, with ``status`` error until the compile says otherwise."""
        return BuildMetrics(
            suite=suite,
            kernel=self.kernel,
            function=self.launch.function,
            language=language_of(self.launch),
            arch=self.arch,
            config=self.config,
            status="error",
            dtype=self.dtype,
            workload=self.workload,
            case=self.case,
            launch_index=self.launch_index,
        )


class BuildPlan(NamedTuple):
    """The jobs to compile, the error records of targets whose launches could not be
    recorded, and each recorded case's recipe."""

    jobs: list[Job]
    failures: list[BuildMetrics]
    recipes: list[CaseRecipe]


def plan_builds(
    suite: Suite,
    kernels: Sequence[str],
    workload: str,
    dtypes: Sequence[str],
    archs: Sequence[str],
    every_dtype: bool = False,
) -> BuildPlan:
    """The jobs to compile, an error record per (kernel, dtype, arch) whose launches could
    not be recorded (a spec whose ``launch`` needs real data, say), and the recipe of every
    case recorded. A spec that raises ``KernelUnsupported`` while recording (a TODO
    ``kernelwatch init`` left) has no build. With no ``dtypes``, the serving dtypes
    (:func:`default_dtypes`) are built; with ``every_dtype`` too, every dtype of the spec is
    recorded (what a timing stage runs, so that every case it times has a recipe), the ones
    not built identified by their launches' cache keys."""
    jobs: list[Job] = []
    failures: list[BuildMetrics] = []
    recipes: list[CaseRecipe] = []
    for spec in suite.kernels:
        if (kernels and spec.name not in kernels) or not isinstance(spec, KernelSpec):
            continue  # a distributed spec's launches need its ranks: not built here
        chosen = workload if workload in spec.workloads else next(iter(spec.workloads))
        built = [d for d in spec.dtypes if d in dtypes] if dtypes else default_dtypes(spec)
        recorded = spec.dtypes if every_dtype and not dtypes else built
        for dtype in recorded:
            per_arch: list[list[Job]] = []
            cases = _Cases()
            for arch in archs:
                try:
                    launches = _record(spec, chosen, dtype, arch, cases)
                except KernelUnsupported:
                    per_arch, cases = [], _Cases()  # nothing to build yet: a TODO
                    break
                except Exception as exc:  # the spec's failure, recorded per target
                    if dtype in built:
                        failures.append(
                            _unrecorded(suite.name, spec.name, dtype, chosen, arch, exc)
                        )
                    cases.failed = True
                    continue
                per_arch.append(
                    [Job(spec.name, dtype, chosen, case, config, launch, arch, index)
                     for case, config, launch, index in launches]
                )  # fmt: skip
            if dtype in built:
                # Both targets of one launch side by side (the workers share tasks by position).
                jobs += [job for row in itertools.zip_longest(*per_arch) for job in row if job]
            recipes += cases.recipes(suite.name, spec, dtype, chosen)
    return BuildPlan(jobs, failures, recipes)


def default_dtypes(spec: KernelSpec) -> tuple[str, ...]:
    """What is built when no dtype is asked for: the 16- and 8-bit dtypes LLM serving runs
    in, when the spec has them (fp32 doubles the build time for a path production rarely
    takes)."""
    served = tuple(d for d in spec.dtypes if d in ("fp16", "bf16", "fp8"))
    return served or tuple(spec.dtypes)


def _unrecorded(
    suite: str, kernel: str, dtype: str, workload: str, arch: str, exc: Exception
) -> BuildMetrics:
    """The error record of a target whose launches could not be recorded."""
    return BuildMetrics(
        suite,
        kernel,
        "",
        "triton",
        arch,
        None,
        "error",
        f"could not record the launches on the meta device: {_one_line(exc)}",
        detail=traceback.format_exc(limit=6)[-4000:],
        dtype=dtype,
        workload=workload,
    )


@dataclass
class _Cases:
    """Each case's launches and host work, gathered target by target while recording."""

    steps: dict[str, list[LaunchStep]] = field(default_factory=lambda: defaultdict(list))
    params: dict[str, Any] = field(default_factory=dict)
    host: dict[str, list[Any]] = field(default_factory=lambda: defaultdict(list))
    unknown: dict[str, str] = field(default_factory=dict)
    failed: bool = False  # a target's launches could not be recorded: no case is known

    def recipes(self, suite: str, spec: KernelSpec, dtype: str, workload: str) -> list[CaseRecipe]:
        environment = {"torch": torch.__version__, "cuda": str(torch.version.cuda),
                       "triton": metadata.version("triton")}  # fmt: skip
        inputs = code_digest(spec.make_inputs), code_digest(spec.make_outputs)
        made = []
        for label, steps in self.steps.items():
            host = repr((inputs, self.host[label], sorted(environment.items())))
            unknown = self.unknown.get(label, "")
            if self.failed:
                unknown = "the launches of a target could not be recorded"
            elif None in inputs:
                unknown = "its inputs are made by code that cannot be read"
            made.append(
                CaseRecipe(suite, spec.name, dtype, workload, label, self.params[label],
                           tuple(steps), hashlib.sha256(host.encode()).hexdigest(), unknown)
            )  # fmt: skip
        return made


def _record(
    spec: KernelSpec, workload: str, dtype: str, arch: str, cases: _Cases
) -> list[tuple[str, LaunchConfig | None, Launch, int]]:
    """Distinct (case label, config, launch, launch index) of one spec and dtype for one
    target (a host wrapper asking ``torch.cuda.get_device_capability`` is told the
    target's): a specialisation that several cases share is kept once, under the first
    case's label and its position among that case's launches. Each case's launches, each
    naming the build that compiles it, and its host work go into ``cases``."""
    generator = torch.Generator().manual_seed(0)
    meta = torch.device("meta")
    seen: dict[str, tuple[str, LaunchConfig | None, Launch, int]] = {}
    for config in spec.configs or (None,):
        for params in spec.cases(workload):
            label = CaseId("", spec.name, workload, dict(params), dtype).label()
            cases.params[label] = dict(params)
            cases.steps.setdefault(label, [])  # a case that launches nothing is a case too
            with recording(ARCHS[arch].capability) as recorder:
                inputs = spec.make_inputs(params, DTYPES[dtype], meta, generator)
                bound = launcher.bind(spec, inputs, params)
                with HostOps() as host:
                    _, used = launcher.launch(spec, bound, params, config)
            try:
                described = describe(sorted(inputs.items()))
            except ValueError as exc:
                cases.unknown.setdefault(label, f"an input cannot be described: {exc}")
                described = None
            cases.host[label].append(repr((arch, config, described, host.ops)))
            if host.library is not None:
                cases.unknown.setdefault(
                    label, f"its launch calls {host.library}, a library kernel no build covers"
                )
            for launch, index in zip(recorder.launches, recorder.calls, strict=True):
                launch_config = launch.config or used
                key = repr((launch_config, launch.identity()))
                first, _, _, first_index = seen.setdefault(
                    key, (label, launch_config, launch, index)
                )
                cases.steps[label].append(
                    LaunchStep(arch, index, launch.function, first, first_index, launch_config,
                               launch.work, _key(launch, arch))
                )  # fmt: skip
    return list(seen.values())


def _key(launch: Launch, arch: str) -> str | None:
    """The launch's cache key, or None when it cannot be computed (its source unreadable)."""
    try:
        return launch_key(launch, arch)[0]
    except Exception:  # the kernel's own problem: its build records it, the case is unknown
        return None


#: Code whose changes are the environment's (its versions are in every recipe), not the
#: suite's: not followed into.
_LIBRARIES = frozenset({"torch", "triton", "numpy", "scipy", "kernelwatch"})


def code_digest(fn: Any) -> str | None:
    """A hash of what ``fn`` does, without its line numbers: its bytecode, constants and
    names, its closure's values and default arguments, and the same of every function of the
    suite's own code that it reads as a global, transitively (a comment or a moved line is
    no change; an edited helper is). "none" when there is no ``fn``; None when ``fn`` is not
    code this can read (a callable object, a C function)."""
    if fn is None:
        return "none"
    parts: list[Any] = []
    seen: set[int] = set()

    def visit(function: Any) -> bool:
        while isinstance(function, types.MethodType):
            function = function.__func__
        if not isinstance(function, types.FunctionType):
            return False
        if id(function) in seen:
            return True
        seen.add(id(function))
        parts.append(function.__qualname__)
        _code(function.__code__, parts)
        for value in (*(c.cell_contents for c in function.__closure__ or ()),
                      *(function.__defaults__ or ())):  # fmt: skip
            if not _value(value, parts, visit):
                return False
        for name in _names(function.__code__):
            if name in function.__globals__:
                value = function.__globals__[name]
                if not _value(value, parts, visit, follow_only=True):
                    return False
        return True

    if not visit(fn):
        return None
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _code(code: types.CodeType, parts: list[Any]) -> None:
    """A code object's bytecode, names and constants (nested code too), not its lines."""
    parts.append((code.co_code, code.co_names, code.co_varnames, code.co_freevars))
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            _code(constant, parts)
        else:
            parts.append(repr(constant))


def _names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            names += _names(constant)
    return names


def _value(value: Any, parts: list[Any], visit: Any, follow_only: bool = False) -> bool:
    """Add what decides ``value`` to ``parts``: a function of the suite's own code is
    followed, a library's (and modules, classes) taken as the environment's; a plain value
    by its description. A closure value or default that cannot be described makes the
    digest unknown; a global that cannot is skipped (``follow_only``): a module-level object
    the code reads by name is the environment's or the suite's data."""
    if isinstance(value, (types.FunctionType, types.MethodType)):
        module = getattr(value, "__module__", None) or ""
        if module.split(".")[0] in _LIBRARIES or module.split(".")[0] in sys.stdlib_module_names:
            parts.append(f"{module}.{value.__qualname__}")
            return True
        return visit(value)
    if isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType)):
        return True
    try:
        parts.append(describe(value))
    except ValueError:
        return follow_only
    return True


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
