"""Choose where kernels run and describe it: a CUDA GPU when torch sees one, else the CPU
through Triton's interpreter. One code path serves both; only this module knows the difference.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata

from kernelwatch.harness.records import DeviceInfo, SoftwareInfo

#: Why the Triton interpreter cannot vouch for a dtype (Triton 3.9, shared/reference/toolchain.md).
INTERPRETER_GAPS: dict[str, str] = {
    "bf16": (
        "Triton's CPU interpreter computes bf16 arithmetic and bf16 tl.dot wrongly, "
        "so a bf16 result here would say nothing about the GPU; run on a GPU"
    ),
}


@dataclass(frozen=True)
class Device:
    """The runtime device: where tensors live and what the Triton backend can do there."""

    torch_device: str
    info: DeviceInfo
    can_autotune: bool
    unsupported_dtypes: Mapping[str, str] = field(default_factory=dict)

    def synchronize(self) -> None:
        """Wait for the work queued on the device the tensors live on."""
        if self.torch_device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()


def select_device() -> Device:
    """Pick CUDA if available, else switch Triton to its interpreter (with kernelwatch's
    fixes, ``interpreter.py``).

    Must run before anything imports Triton: ``TRITON_INTERPRET`` is read at import time.
    """
    import torch

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info = DeviceInfo(
            kind="cuda",
            name=props.name,
            host=socket.gethostname(),
            interpreter=False,
            uuid=str(getattr(props, "uuid", "")) or None,
            capability=f"{props.major}.{props.minor}",
            sm_count=props.multi_processor_count,
            # Sizes the L2 flush of cold timing (timing.flush_bytes).
            l2_bytes=getattr(props, "L2_cache_size", None) or None,
        )
        return Device("cuda", info, can_autotune=True)
    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError(
            "Triton was imported before the device was chosen, without TRITON_INTERPRET=1; "
            "call select_device() first"
        )
    os.environ["TRITON_INTERPRET"] = "1"
    from kernelwatch.harness.interpreter import patch_interpreter

    patch_interpreter()  # float arguments and libdevice as the GPU compiler has them
    info = DeviceInfo(
        kind="cpu",
        name=_cpu_name(),
        host=socket.gethostname(),
        interpreter=True,
    )
    return Device("cpu", info, can_autotune=False, unsupported_dtypes=dict(INTERPRETER_GAPS))


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def software_info(suite_source: str | None = None) -> SoftwareInfo:
    """Versions of kernelwatch, Python, torch, Triton, CUDA and the driver (None if absent),
    and the suite's source (``suite.source_of``) when one was imported."""
    import torch

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "unknown"

    return SoftwareInfo(
        kernelwatch=version("kernelwatch"),
        python=platform.python_version(),
        torch=torch.__version__,
        triton=version("triton"),
        cuda=torch.version.cuda,
        driver=_driver_version() if torch.cuda.is_available() else None,
        suite_source=suite_source,
    )


def _driver_version() -> str | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
        try:
            return pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        return None
