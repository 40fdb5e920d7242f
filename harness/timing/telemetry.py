"""What the GPU reports while it is being timed, through NVML (nvidia-ml-py, ``pynvml``).

A :class:`Probe` reads clocks and throttle reasons once per sample and the device's state
(temperature, power, other processes) around a measurement. :func:`open_probe` returns an
NVML-backed probe, or a :class:`NullProbe` whose readings are all unknown (None) when NVML
is missing, cannot start, or cannot find the device: telemetry never crashes a run. The
NVML module is passed in, so tests drive the real code path with a fake one.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Protocol

from kernelwatch.harness.records import Telemetry
from kernelwatch.harness.timing.sampling import Sample

#: Clock-event (throttle) reasons that slow the GPU down; any of them spoils a sample. The
#: other bits (0x1 idle, 0x2 application clocks, 0x10 sync boost) are benign.
THROTTLE_REASONS: dict[int, str] = {
    0x4: "sw-power-cap",
    0x8: "hw-slowdown",
    0x20: "sw-thermal-slowdown",
    0x40: "hw-thermal-slowdown",
    0x80: "hw-power-brake",
}
THROTTLE_MASK = reduce(int.__or__, THROTTLE_REASONS)


def is_throttled(reasons: int | None) -> bool:
    """Whether a throttle-reason bitmask slows the GPU down (unknown is not throttled)."""
    return reasons is not None and bool(reasons & THROTTLE_MASK)


def describe_reasons(reasons: int) -> str:
    """``0x24`` -> ``sw-power-cap,sw-thermal-slowdown``."""
    return ",".join(name for bit, name in THROTTLE_REASONS.items() if reasons & bit)


@dataclass(frozen=True)
class Reading:
    """Per-sample device readings; None where unknown."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None


@dataclass(frozen=True)
class State:
    """Device state around a measurement; None where unknown."""

    temperature_c: float | None = None
    power_w: float | None = None
    other_processes: int | None = None


class Probe(Protocol):
    """Reads the device. ``available`` is False when every reading will be unknown."""

    available: bool

    def read(self) -> Reading: ...

    def state(self) -> State: ...


class NullProbe:
    """No telemetry: every reading is unknown."""

    available = False

    def read(self) -> Reading:
        return Reading()

    def state(self) -> State:
        return State()


class NvmlProbe:
    """Telemetry of one GPU through an NVML module (``pynvml`` or a test's fake)."""

    available = True

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        # The call was renamed in NVML 12.x (clocks "throttle" -> "event" reasons).
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )

    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """One NVML query; None when the call is missing or the device does not support it."""
        if fn is None:
            return None
        try:
            return fn(self._handle, *args)
        except self._nvml.NVMLError:
            return None

    def read(self) -> Reading:
        nvml = self._nvml
        sm = self._call(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)
        mem = self._call(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)
        reasons = self._call(self._reasons)
        return Reading(
            None if sm is None else float(sm),
            None if mem is None else float(mem),
            None if reasons is None else int(reasons),
        )

    def state(self) -> State:
        nvml = self._nvml
        temperature = self._call(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._call(nvml.nvmlDeviceGetPowerUsage)
        processes = self._call(nvml.nvmlDeviceGetComputeRunningProcesses)
        return State(
            None if temperature is None else float(temperature),
            None if power_mw is None else power_mw / 1000.0,
            _others(processes),
        )


def _others(processes: Sequence[Any] | None) -> int | None:
    # This process holds a CUDA context, so it is one of the entries. Its PID as NVML sees it
    # may differ from os.getpid() inside a container, hence a count rather than a PID match;
    # an empty list means NVML cannot see processes here at all: unknown.
    if not processes:
        return None
    return len(processes) - 1


def open_probe(uuid: str | None, nvml: Any = None) -> Probe:
    """An NVML probe for the GPU with ``uuid`` (as torch reports it), else a NullProbe.

    The UUID, not an index, picks the device: NVML numbers every GPU on the host while
    CUDA numbers only the visible ones.
    """
    if uuid is None:
        return NullProbe()
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return NullProbe()
    try:
        nvml.nvmlInit()
        handle = nvml.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid))
    except nvml.NVMLError:
        return NullProbe()
    return NvmlProbe(nvml, handle)


def nvml_uuid(uuid: str) -> str:
    """NVML names GPUs ``GPU-<uuid>``; torch reports the bare UUID."""
    return uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"


def sampled(timed: Callable[[], float], probe: Probe) -> Callable[[], Sample]:
    """Wrap a timer's sampler so each sample carries the readings taken right after it."""

    def sample() -> Sample:
        ns = timed()
        reading = probe.read()
        return Sample(
            ns,
            reading.sm_clock_mhz,
            reading.mem_clock_mhz,
            reading.throttle_reasons,
            is_throttled(reading.throttle_reasons),
        )

    return sample


def summarize_telemetry(
    available: bool, samples: Sequence[Sample], states: Sequence[State]
) -> Telemetry:
    """Median clocks over the samples, the hottest and most power-hungry state seen, every
    throttle bit seen, and the most other processes seen; unknown stays None."""
    if not available:
        return Telemetry(available=False)

    def known(values: Sequence[float | int | None]) -> list[float | int]:
        return [v for v in values if v is not None]

    sm = known([s.sm_clock_mhz for s in samples])
    mem = known([s.mem_clock_mhz for s in samples])
    reasons = known([s.throttle_reasons for s in samples])
    temperatures = known([s.temperature_c for s in states])
    power = known([s.power_w for s in states])
    others = known([s.other_processes for s in states])
    return Telemetry(
        available=True,
        sm_clock_mhz=statistics.median(sm) if sm else None,
        mem_clock_mhz=statistics.median(mem) if mem else None,
        temperature_c=max(temperatures) if temperatures else None,
        power_w=max(power) if power else None,
        throttle_reasons=reduce(int.__or__, reasons, 0) if reasons else None,
        other_processes=max(others) if others else None,
    )
