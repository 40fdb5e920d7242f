"""What the GPU reports while it is being timed, through NVML (nvidia-ml-py, ``pynvml``).

A :class:`Probe` reads clocks, clock-event reasons, the slowdown counters and the other
processes on the GPU around every sample (and the reasons once more while the GPU runs it),
and the device's state (temperature, power, other processes) around a measurement.
:func:`open_probe` returns an NVML-backed probe, or a :class:`NullProbe` whose readings are
all unknown (None) when NVML is missing, cannot start, or cannot find the device: telemetry
never crashes a run. The NVML module is passed in, so tests drive the real code path with a
fake one.

A sample is flagged ``throttled`` (kept in the record, left out of the statistic) as nvbench
decides it, from the SM clock: the lower of the clocks the timer measured before and after
the sample, flagged below :data:`THROTTLE_CLOCK_RATIO` of the device's maximum; and, beyond
nvbench, by the slowdowns (:data:`SLOWDOWN_REASONS`: hardware slowdown, SW and HW thermal
slowdown, power brake) seen before, during or after the sample, or counted by NVML's
slowdown-time counters (:data:`SLOWDOWN_COUNTERS`) between before and after: they clamp the
clock in bursts a reading beside the sample can miss. Another compute process on the GPU
during the sample flags it too: its work shares the SMs and memory with the kernel. The
other reason bits are recorded as information only: H100s and H200s sit at their software
power cap (0x4) through most compute-bound work at nearly full clock, and keeping only the
samples taken without it would keep those taken after a pause, cooler than the kernel runs;
a power cap that really lowers the clock is caught by the clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any, Protocol

from kernelwatch.harness.records import Telemetry
from kernelwatch.harness.timing.sampling import Sample


@dataclass(frozen=True)
class Timed:
    """One sample as a timer (``timers.py``) read it: nanoseconds per launch; the SM clock
    over it, the mean of the clocks the GPU measured just before and just after it (None
    where the timer cannot measure it); the lower of those two (``low_sm_clock_mhz``, None:
    the same as ``sm_clock_mhz``), which the throttle flag judges; and the clock-event
    reasons read while the GPU ran it (None: not read)."""

    ns: float
    sm_clock_mhz: float | None = None
    low_sm_clock_mhz: float | None = None
    reasons: int | None = None


#: A sample whose SM clock is below this share of the device's maximum is throttled
#: (nvbench's default threshold).
THROTTLE_CLOCK_RATIO = 0.75

#: NVML's clock-event reasons, as information (``describe_reasons``). 0x2 is also what
#: clocks locked by ``nvidia-smi -lgc`` report.
CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu-idle",
    0x2: "applications-clocks",
    0x4: "sw-power-cap",
    0x8: "hw-slowdown",
    0x10: "sync-boost",
    0x20: "sw-thermal-slowdown",
    0x40: "hw-thermal-slowdown",
    0x80: "hw-power-brake",
    0x100: "display-clocks",
}
LOCKED_CLOCKS_REASON = 0x2
#: hw-slowdown, sw-thermal-slowdown, hw-thermal-slowdown, hw-power-brake: a sample they
#: touched is throttled.
SLOWDOWN_REASONS = 0x8 | 0x20 | 0x40 | 0x80
#: NVML's slowdown-time counters (``nvmlDeviceGetFieldValues``; nanoseconds the clock was held
#: down, since boot), by field id, and the reason bit each counts: pynvml's
#: ``NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN``, ``..._HW_THERM_SLOWDOWN`` and
#: ``..._HW_POWER_BRAKE_SLOWDOWN``. HW slowdown (0x8) has none; its causes are these two.
SLOWDOWN_COUNTERS: dict[int, int] = {269: 0x20, 270: 0x40, 271: 0x80}


def is_throttled(sm_clock_mhz: float | None, max_sm_clock_mhz: float | None) -> bool:
    """Whether a sample's SM clock is below :data:`THROTTLE_CLOCK_RATIO` of the device's
    maximum (unknown is not throttled)."""
    if sm_clock_mhz is None or not max_sm_clock_mhz:
        return False
    return sm_clock_mhz < THROTTLE_CLOCK_RATIO * max_sm_clock_mhz


def describe_reasons(reasons: int) -> str:
    """``0x24`` -> ``sw-power-cap,sw-thermal-slowdown``."""
    return ",".join(name for bit, name in CLOCK_EVENT_REASONS.items() if reasons & bit)


@dataclass(frozen=True)
class Reading:
    """Per-sample device readings; None where unknown. ``slowdown_ns``: each counted reason
    bit's slowdown-time counter (:data:`SLOWDOWN_COUNTERS`); ``other_processes``: compute
    processes on the GPU besides this one."""

    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle_reasons: int | None = None
    slowdown_ns: Mapping[int, int] | None = None
    other_processes: int | None = None


@dataclass(frozen=True)
class State:
    """Device state around a measurement; None where unknown."""

    temperature_c: float | None = None
    power_w: float | None = None
    other_processes: int | None = None


@dataclass(frozen=True)
class ClockPolicy:
    """How the device is set up to clock (the self-check reports it); None where unknown.
    ``applications_sm_mhz`` differs from ``default_applications_sm_mhz`` when someone set
    application clocks."""

    max_sm_clock_mhz: float | None = None
    power_limit_w: float | None = None
    persistence_mode: bool | None = None
    applications_sm_mhz: float | None = None
    default_applications_sm_mhz: float | None = None


class Probe(Protocol):
    """Reads the device. ``available`` is False when every reading will be unknown;
    ``max_sm_clock_mhz`` is the reference throttling is judged against (None: unknown).
    ``read_reasons`` is the one light query a timer makes while the GPU runs a sample."""

    available: bool
    max_sm_clock_mhz: float | None

    def read(self) -> Reading: ...

    def read_reasons(self) -> int | None: ...

    def state(self) -> State: ...

    def policy(self) -> ClockPolicy: ...


class NullProbe:
    """No telemetry: every reading is unknown."""

    available = False
    max_sm_clock_mhz = None

    def read(self) -> Reading:
        return Reading()

    def read_reasons(self) -> int | None:
        return None

    def state(self) -> State:
        return State()

    def policy(self) -> ClockPolicy:
        return ClockPolicy()


def nvml_errors(nvml: Any) -> tuple[type[BaseException], ...]:
    """What an NVML call may raise for "not here": its errors, and the library-mismatch error
    pynvml raises outside that hierarchy when its wrappers and the driver disagree."""
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    return (nvml.NVMLError, mismatch) if mismatch is not None else (nvml.NVMLError,)


class NvmlProbe:
    """Telemetry of one GPU through an NVML module (``pynvml`` or a test's fake)."""

    available = True

    def __init__(self, nvml: Any, handle: Any, siblings: int = 0) -> None:
        self._nvml = nvml
        self._handle = handle
        self._siblings = siblings
        self._errors = nvml_errors(nvml)
        self._field_values = getattr(nvml, "nvmlDeviceGetFieldValues", None)
        # The call was renamed in NVML 12.x (clocks "throttle" -> "event" reasons); pynvml
        # has both names, and a driver may lack the new symbol (FunctionNotFound).
        self._reasons = [
            fn
            for name in (
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            )
            if (fn := getattr(nvml, name, None)) is not None
        ]
        self.max_sm_clock_mhz = _float(
            self._call(getattr(nvml, "nvmlDeviceGetMaxClockInfo", None), nvml.NVML_CLOCK_SM)
        )

    def _call(self, fn: Callable[..., Any] | None, *args: Any) -> Any:
        """One NVML query; None when the call is missing or the device does not support it."""
        if fn is None:
            return None
        try:
            return fn(self._handle, *args)
        except self._errors:
            return None

    def _clock_event_reasons(self) -> int | None:
        not_found = getattr(self._nvml, "NVMLError_FunctionNotFound", None)
        while self._reasons:
            try:
                return int(self._reasons[0](self._handle))
            except self._errors as exc:
                if not_found is None or not isinstance(exc, not_found):
                    return None
                self._reasons.pop(0)  # this driver lacks the symbol: use the older name
        return None

    def _slowdown_ns(self) -> dict[int, int] | None:
        """The slowdown-time counters this driver has, by reason bit (None: none)."""
        values = self._call(self._field_values, list(SLOWDOWN_COUNTERS))
        success = getattr(self._nvml, "NVML_SUCCESS", 0)
        counted = {
            SLOWDOWN_COUNTERS[v.fieldId]: int(v.value.ullVal)
            for v in values or ()
            if v.nvmlReturn == success and v.fieldId in SLOWDOWN_COUNTERS
        }
        if not counted:
            self._field_values = None  # a driver without the fields: do not ask every sample
            return None
        return counted

    def read(self) -> Reading:
        nvml = self._nvml
        return Reading(
            _float(self._call(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM)),
            _float(self._call(nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM)),
            self._clock_event_reasons(),
            self._slowdown_ns(),
            self._other_processes(),
        )

    def read_reasons(self) -> int | None:
        return self._clock_event_reasons()

    def _other_processes(self) -> int | None:
        processes = self._call(self._nvml.nvmlDeviceGetComputeRunningProcesses)
        return _others(processes, self._siblings)

    def policy(self) -> ClockPolicy:
        nvml = self._nvml
        limit_mw = self._call(getattr(nvml, "nvmlDeviceGetEnforcedPowerLimit", None))
        persistence = self._call(getattr(nvml, "nvmlDeviceGetPersistenceMode", None))
        sm = getattr(nvml, "NVML_CLOCK_SM", None)
        return ClockPolicy(
            max_sm_clock_mhz=self.max_sm_clock_mhz,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            persistence_mode=None if persistence is None else bool(persistence),
            applications_sm_mhz=_float(
                self._call(getattr(nvml, "nvmlDeviceGetApplicationsClock", None), sm)
            ),
            default_applications_sm_mhz=_float(
                self._call(getattr(nvml, "nvmlDeviceGetDefaultApplicationsClock", None), sm)
            ),
        )

    def state(self) -> State:
        nvml = self._nvml
        temperature = self._call(nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._call(nvml.nvmlDeviceGetPowerUsage)
        return State(
            None if temperature is None else float(temperature),
            None if power_mw is None else power_mw / 1000.0,
            self._other_processes(),
        )


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


def _others(processes: Sequence[Any] | None, siblings: int = 0) -> int | None:
    # This process holds a CUDA context, so it is one of the entries. Its PID as NVML sees it
    # may differ from os.getpid() inside a container, hence a count rather than a PID match;
    # an empty list means NVML cannot see processes here at all: unknown. ``siblings`` are
    # the other side processes of an A/B pair, which hold contexts too but sit idle while
    # this one samples (the parent alternates them); a sibling restarting may be missing.
    if not processes:
        return None
    return max(0, len(processes) - 1 - siblings)


def open_probe(uuid: str | None, nvml: Any = None, siblings: int = 0) -> Probe:
    """An NVML probe for the GPU with ``uuid`` (as torch reports it), else a NullProbe.
    ``siblings``: processes of this run expected on the GPU besides this one (an A/B
    pair's other side), not counted as other processes.

    The UUID, not an index, picks the device: NVML numbers every GPU on the host while
    CUDA numbers only the visible ones. A MIG slice is found under its ``MIG-`` name.
    """
    if uuid is None:
        return NullProbe()
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return NullProbe()
    errors = nvml_errors(nvml)
    try:
        nvml.nvmlInit()
    except errors:
        return NullProbe()
    for name in nvml_uuids(uuid):
        try:
            return NvmlProbe(nvml, nvml.nvmlDeviceGetHandleByUUID(name), siblings)
        except errors:
            continue
    return NullProbe()


def nvml_uuids(uuid: str) -> list[str]:
    """The names NVML may know a device by: ``GPU-<uuid>`` for a whole GPU, ``MIG-<uuid>``
    for a MIG slice; torch reports the bare UUID."""
    if uuid.startswith(("GPU-", "MIG-")):
        return [uuid]
    return [f"GPU-{uuid}", f"MIG-{uuid}"]


def sampled(take: Callable[[], Timed], probe: Probe) -> Callable[[], Sample]:
    """Wrap a timer's ``take`` so each sample carries the device's readings over it: the SM
    clock the timer measured (else the lower of NVML's readings before and after), the memory
    clock after, the clock-event reasons seen before, during or after it or counted by a
    slowdown counter between, the most other processes seen, and whether the sample was
    throttled: its lowest clock against the device's maximum, a slowdown, or another
    process on the GPU."""

    def sample() -> Sample:
        before = probe.read()
        timed = take()
        after = probe.read()
        clock, low = timed.sm_clock_mhz, timed.low_sm_clock_mhz
        if clock is None:
            clock = min(_known([before.sm_clock_mhz, after.sm_clock_mhz]), default=None)
        known = _known([before.throttle_reasons, timed.reasons, after.throttle_reasons])
        counted = _counted(before.slowdown_ns, after.slowdown_ns)
        if counted is not None:
            known.append(counted)
        reasons = reduce(int.__or__, known) if known else None
        others = max(_known([before.other_processes, after.other_processes]), default=None)
        return Sample(
            timed.ns,
            clock,
            after.mem_clock_mhz,
            reasons,
            is_throttled(clock if low is None else low, probe.max_sm_clock_mhz)
            or bool((reasons or 0) & SLOWDOWN_REASONS)
            or bool(others),
            others,
        )

    return sample


def _counted(before: Mapping[int, int] | None, after: Mapping[int, int] | None) -> int | None:
    """The reason bits whose slowdown counter moved between two readings (None: unknown)."""
    if before is None or after is None:
        return None
    return reduce(int.__or__, (bit for bit, ns in after.items() if ns > before.get(bit, ns)), 0)


def _known(values: Sequence[Any]) -> list[Any]:
    return [v for v in values if v is not None]


def summarize_telemetry(
    available: bool, samples: Sequence[Sample], states: Sequence[State]
) -> Telemetry:
    """Median clocks over the samples, the hottest and most power-hungry state seen, every
    clock-event reason seen, and the most other processes seen around the measurement or
    any of its samples; unknown stays None."""
    if not available:
        return Telemetry(available=False)

    sm = _known([s.sm_clock_mhz for s in samples])
    mem = _known([s.mem_clock_mhz for s in samples])
    reasons = _known([s.throttle_reasons for s in samples])
    temperatures = _known([s.temperature_c for s in states])
    power = _known([s.power_w for s in states])
    others = _known([s.other_processes for s in [*states, *samples]])
    return Telemetry(
        available=True,
        sm_clock_mhz=statistics.median(sm) if sm else None,
        mem_clock_mhz=statistics.median(mem) if mem else None,
        temperature_c=max(temperatures) if temperatures else None,
        power_w=max(power) if power else None,
        throttle_reasons=reduce(int.__or__, reasons, 0) if reasons else None,
        other_processes=max(others) if others else None,
    )
