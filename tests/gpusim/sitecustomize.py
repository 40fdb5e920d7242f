"""A simulated H200 that reaches the GPU self-check's sandboxed children, for rehearsing
``scripts/gpu-selfcheck.sh`` on a machine without a GPU (tests/test_gpu_rehearsal.py).

Python imports ``sitecustomize`` at start-up from ``PYTHONPATH``, which the sandbox passes to
its children (``harness/isolation/sandbox.py``'s ``ALLOWED``), so this folder on ``PYTHONPATH``
reaches the self-check's parent, the jail and every kernel child. Each of them gets ``tests/``
on its path (for ``fakegpu``); only a kernel child (``python -m
kernelwatch.harness.isolation.kernel_child``) is changed, and only as the kernelwatch modules
it imports load (a ``sys.meta_path`` hook): the parent stays torch-free, and the child imports
in its own order (the device is chosen before Triton is imported). In the child:

- the device is an H200 as far as kernelwatch knows (``DeviceInfo`` kind ``cuda``, 132 SMs,
  50 MiB of L2) while tensors stay on the CPU;
- CUDA events, spins, graphs, ``do_bench``, ``torch.utils.benchmark`` and the profiler of
  the traced step are ``tests/fakegpu.py``'s ``FakeGpu``, and ``pynvml`` its fake NVML;
- a timed case never runs its kernel: each launch advances the simulated GPU by the spec's
  own work (``flops``, ``min_bytes``) at the rates measured on the H200 this project borrows
  (shared/reference/gpu-timing.md), so llm shapes cost no CPU time; the autotuner's choice
  is taken to be the spec's pinned config, and the stock-library baseline takes as long;
- the correctness checks run for real on the CPU device (Triton's interpreter), whose
  declared gaps (bf16, ``harness/device.py``'s ``INTERPRETER_GAPS``) they report as such.

What this cannot rehearse: compiling for and launching on a real GPU, the CUDA C++ kernel's
cubin, real clocks and real noise: the verdicts it leads to say that the path runs, not how
well the statistics judge (:data:`JITTER` is a stand-in, not a measured spread).
"""

from __future__ import annotations

import importlib.abc
import inspect
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

TESTS = Path(__file__).resolve().parent.parent
RUNNER = "kernelwatch.harness.isolation.kernel_child"
PRELOAD = "kernelwatch.harness.isolation.preload"

#: The H200's rates as measured on the device machine (shared/reference/gpu-timing.md): the
#: copy and the 8192^3 bf16 GEMM on random data. One rate for every dtype: the self-check
#: times bf16.
HBM_BYTES_PER_NS = 4300.0
FLOPS_PER_NS = 790e3
#: What every launch costs on the GPU besides its work (a few microseconds on real kernels).
LAUNCH_NS = 2_000.0
#: The ceilings' workloads, as big as the real ones on a GPU (harness/timing/ceilings.py).
COPY_BYTES, GEMM_SIZE = 1 << 30, 8192
#: Launch-to-launch spread of a kernel's duration (relative standard deviation): real
#: kernels are not exactly repeatable.
JITTER = 0.01


def kernel_ns(flops: float, nbytes: float) -> float:
    """One launch's GPU time: the roofline's floor for its work, plus the launch."""
    return LAUNCH_NS + max(nbytes / HBM_BYTES_PER_NS, flops / FLOPS_PER_NS)


def is_runner(argv: list[str]) -> bool:
    """Whether ``argv`` (``sys.orig_argv``) starts the kernel child: its first ``-m`` names
    the runner (the jail's command line names it later, as the command it executes), or the
    preload server whose forks become kernel children (``harness/isolation/preload.py``)."""
    if "-m" not in argv:
        return False
    after = argv[argv.index("-m") + 1 :]
    return after[:1] == [RUNNER] or after[:2] == [PRELOAD, RUNNER]


class _Patched(importlib.abc.Loader):
    """A module's own loader, then ``patch`` on the module it made."""

    def __init__(self, loader: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.loader, self.patch = loader, patch

    def create_module(self, spec: Any) -> ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        self.patch(module)


class _Hook(importlib.abc.MetaPathFinder):
    """Finds modules as the other finders do and patches those named in ``patches``."""

    def __init__(self, patches: dict[str, Callable[[ModuleType], None]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        patch = self.patches.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Patched(spec.loader, patch)
                return spec
        return None


def install() -> None:
    """Make this kernel child's device the simulated H200 (the module docstring says how)."""
    from fakegpu import FakeGpu

    gpu = FakeGpu(jitter=JITTER)
    sys.modules["pynvml"] = gpu.nvml()
    cpu: list[Any] = []  # the real device, for the correctness checks

    def patch_device(module: ModuleType) -> None:
        from kernelwatch.harness.records import DeviceInfo

        choose = module.select_device
        h200 = DeviceInfo("cuda", "NVIDIA H200", "gpusim", False, "5eb1-gpusim", "9.0", 132,
                          50 << 20)  # fmt: skip

        def select_device() -> Any:
            cpu[:] = [choose()]  # Triton's interpreter, for the checks
            return module.Device("cpu", h200, can_autotune=True)

        module.select_device = select_device

    def patch_correctness(module: ModuleType) -> None:
        check = module.check_case
        signature = inspect.signature(check)

        def check_case(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.arguments["device"] = cpu[0]
            return check(*bound.args, **bound.kwargs)

        module.check_case = check_case

    def patch_timers(module: ModuleType) -> None:
        class SimulatedCudaTimer(module.CudaTimer):  # type: ignore[name-defined,misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("torch_module", gpu.torch)
                kwargs.setdefault("host_ns", gpu.perf_counter_ns)
                super().__init__(*args, **kwargs)

        module.CudaTimer = SimulatedCudaTimer

    def patch_case(module: ModuleType) -> None:
        from kernelwatch.harness.records import LaunchConfig

        def prepare(
            spec: Any,
            case: Any,
            device: Any,
            seed: int,
            pin: Any,
            inputs: Any = None,
            pin_source: str = "pin-file",
        ) -> Any:
            flops, nbytes = module.work(spec, case)  # a spec's todo is unsupported, as there
            if pin is not None:
                config, source = pin, pin_source
            else:
                fallback = spec.configs[0] if spec.configs else LaunchConfig({})
                config = spec.pinned_config or fallback
                source = "autotune" if spec.configs else "heuristic"
            ns = kernel_ns(flops, nbytes)
            # Named as a Triton kernel of the spec would be, for the traced step's profiler.
            launch = lambda: gpu.launch(ns, 0.0, f"{spec.name}_kernel")  # noqa: E731
            return module.Prepared(dict(inputs or {}), config, source, launch, launch, {})

        module.prepare = prepare

    def patch_ceilings(module: ModuleType) -> None:
        def device_launches(device: Any) -> Any:
            n = GEMM_SIZE
            return module.CeilingLaunches(
                copy=lambda: gpu.kernel(kernel_ns(0, 2 * COPY_BYTES)),
                copy_bytes=COPY_BYTES,
                gemm=lambda: gpu.kernel(kernel_ns(2 * n**3, 3 * 2 * n * n)),
                gemm_size=n,
            )

        module.device_launches = device_launches

    def patch_selfcheck(module: ModuleType) -> None:
        tools = module.device_tools

        def device_tools(device: Any, probe: Any) -> Any:
            return replace(
                tools(device, probe),
                do_bench=gpu.do_bench,
                torch_benchmark=gpu.torch_benchmark,
                profile=gpu.profile,
                observe=gpu.observe,
            )

        module.device_tools = device_tools

    sys.meta_path.insert(
        0,
        _Hook(
            {
                "kernelwatch.harness.device": patch_device,
                "kernelwatch.harness.correctness": patch_correctness,
                "kernelwatch.harness.timing.timers": patch_timers,
                "kernelwatch.harness.timing.case": patch_case,
                "kernelwatch.harness.timing.ceilings": patch_ceilings,
                "kernelwatch.harness.selfcheck.measure": patch_selfcheck,
            }
        ),
    )


# Every process puts tests/ on its path: the child imports fakegpu from there, and the
# parent's path is what the sandbox lets a child see (sandbox.py's _python_dirs).
if str(TESTS) not in sys.path:
    sys.path.append(str(TESTS))
if is_runner(sys.orig_argv):
    install()
