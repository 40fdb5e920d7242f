"""Turn a suite into the list of builds: kernel x dtype x config x specialisation x arch.

Runs in the build child (it launches spec code on the meta device, see ``capture.py``). The
list is deterministic, so several children agree on it and each takes its share by index.
"""

from __future__ import annotations

import itertools
import traceback
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from kernelwatch.harness import launcher
from kernelwatch.harness.build.archs import ARCHS
from kernelwatch.harness.build.capture import Launch, recording
from kernelwatch.harness.records import BuildMetrics, CaseId, LaunchConfig
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
            language="cuda" if hasattr(self.launch, "entry") else "triton",
            arch=self.arch,
            config=self.config,
            status="error",
            dtype=self.dtype,
            workload=self.workload,
            case=self.case,
            launch_index=self.launch_index,
        )


def plan_builds(
    suite: Suite,
    kernels: Sequence[str],
    workload: str,
    dtypes: Sequence[str],
    archs: Sequence[str],
) -> tuple[list[Job], list[BuildMetrics]]:
    """The jobs to compile, and an error record per (kernel, dtype, arch) whose launches could
    not be recorded (a spec whose ``launch`` needs real data, say). A spec that raises
    ``KernelUnsupported`` while recording (a TODO ``kernelwatch init`` left) has no build."""
    jobs: list[Job] = []
    failures: list[BuildMetrics] = []
    for spec in suite.kernels:
        if (kernels and spec.name not in kernels) or not isinstance(spec, KernelSpec):
            continue  # a distributed spec's launches need its ranks: not built here
        chosen = workload if workload in spec.workloads else next(iter(spec.workloads))
        chosen_dtypes = [d for d in spec.dtypes if d in dtypes] if dtypes else default_dtypes(spec)
        for dtype in chosen_dtypes:
            per_arch: list[list[Job]] = []
            for arch in archs:
                try:
                    launches = _record(spec, chosen, dtype, ARCHS[arch].capability)
                except KernelUnsupported:
                    per_arch = []  # nothing to build yet: a TODO the suite still has
                    break
                except Exception as exc:  # the spec's failure, recorded per target
                    failures.append(_unrecorded(suite.name, spec.name, dtype, chosen, arch, exc))
                    continue
                per_arch.append(
                    [Job(spec.name, dtype, chosen, case, config, launch, arch, index)
                     for case, config, launch, index in launches]
                )  # fmt: skip
            # Both targets of one launch side by side (the workers share tasks by position).
            jobs += [job for row in itertools.zip_longest(*per_arch) for job in row if job]
    return jobs, failures


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


def _record(
    spec: KernelSpec, workload: str, dtype: str, capability: int
) -> list[tuple[str, LaunchConfig | None, Launch, int]]:
    """Distinct (case label, config, launch, launch index) of one spec and dtype for one
    target (a host wrapper asking ``torch.cuda.get_device_capability`` is told the
    target's): a specialisation that several cases share is kept once, under the first
    case's label and its position among that case's launches."""
    generator = torch.Generator().manual_seed(0)
    meta = torch.device("meta")
    seen: dict[str, tuple[str, LaunchConfig | None, Launch, int]] = {}
    for config in spec.configs or (None,):
        for params in spec.cases(workload):
            with recording(capability) as recorder:
                inputs = spec.make_inputs(params, DTYPES[dtype], meta, generator)
                _, used = launcher.launch(spec, launcher.bind(spec, inputs, params), params, config)
            for launch, index in zip(recorder.launches, recorder.calls, strict=True):
                launch_config = launch.config or used
                key = repr((launch_config, launch.identity()))
                label = CaseId("", spec.name, workload, dict(params), dtype).label()
                seen.setdefault(key, (label, launch_config, launch, index))
    return list(seen.values())


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
