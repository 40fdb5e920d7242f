"""NVML telemetry through a fake NVML module: readings, throttle flags, and never a crash."""

from __future__ import annotations

from types import SimpleNamespace

from kernelwatch.harness.timing.sampling import Sample
from kernelwatch.harness.timing.telemetry import (
    THROTTLE_MASK,
    NullProbe,
    State,
    describe_reasons,
    is_throttled,
    open_probe,
    sampled,
    summarize_telemetry,
)


class NVMLError(Exception):
    pass


def fake_nvml(reasons=(0,), missing=(), init_fails=False, processes=2):
    """A stand-in for ``pynvml`` returning scripted readings."""
    reasons = iter(reasons)
    opened = []

    def unsupported_if_missing(name, value):
        def call(handle, *args):
            if name in missing:
                raise NVMLError(f"{name} not supported")
            return value(handle, *args) if callable(value) else value

        return call

    def init():
        if init_fails:
            raise NVMLError("driver not loaded")

    def by_uuid(uuid):
        opened.append(uuid)
        return "handle"

    return SimpleNamespace(
        NVMLError=NVMLError,
        NVML_CLOCK_SM=1,
        NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        nvmlInit=init,
        nvmlDeviceGetHandleByUUID=by_uuid,
        nvmlDeviceGetClockInfo=unsupported_if_missing(
            "clocks", lambda h, which: 1980 if which == 1 else 3201
        ),
        nvmlDeviceGetCurrentClocksEventReasons=unsupported_if_missing(
            "reasons", lambda h: next(reasons)
        ),
        nvmlDeviceGetTemperature=unsupported_if_missing("temperature", 41),
        nvmlDeviceGetPowerUsage=unsupported_if_missing("power", 350_500),
        nvmlDeviceGetComputeRunningProcesses=unsupported_if_missing(
            "processes", [object()] * processes
        ),
        opened=opened,
    )


def test_throttle_bits():
    assert THROTTLE_MASK == 0x4 | 0x8 | 0x20 | 0x40 | 0x80
    for bit in (0x4, 0x8, 0x20, 0x40, 0x80):
        assert is_throttled(bit) and is_throttled(bit | 0x1)
    for benign in (0, 0x1, 0x2, 0x10, 0x1 | 0x2 | 0x10):
        assert not is_throttled(benign)
    assert not is_throttled(None)
    assert describe_reasons(0x24) == "sw-power-cap,sw-thermal-slowdown"


def test_probe_reads_by_uuid_and_flags_throttled_samples():
    nvml = fake_nvml(reasons=(0x1, 0x20, 0x0))
    probe = open_probe("8d1f-aa", nvml)
    assert probe.available and nvml.opened == ["GPU-8d1f-aa"]
    arm = sampled(lambda: 1000.0, probe)
    samples = [arm(), arm(), arm()]
    assert [s.throttled for s in samples] == [False, True, False]
    assert samples[1] == Sample(1000.0, 1980.0, 3201.0, 0x20, True)
    state = probe.state()
    assert state == State(41.0, 350.5, 1)  # this process is one of the two
    telemetry = summarize_telemetry(True, samples, [state, State(44.0, 300.0, 0)])
    assert telemetry.throttle_reasons == 0x21
    assert (telemetry.sm_clock_mhz, telemetry.mem_clock_mhz) == (1980.0, 3201.0)
    assert (telemetry.temperature_c, telemetry.power_w, telemetry.other_processes) == (
        44.0,
        350.5,
        1,
    )


def test_unsupported_queries_are_unknown_not_errors():
    probe = open_probe("GPU-1", fake_nvml(missing=("clocks", "reasons", "temperature", "power")))
    reading = probe.read()
    assert (reading.sm_clock_mhz, reading.mem_clock_mhz, reading.throttle_reasons) == (
        None,
        None,
        None,
    )
    assert probe.state() == State(None, None, 1)
    assert not sampled(lambda: 5.0, probe)().throttled
    assert open_probe("GPU-1", fake_nvml(processes=0)).state().other_processes is None


def test_no_nvml_means_unknown_telemetry():
    assert isinstance(open_probe("GPU-1", fake_nvml(init_fails=True)), NullProbe)
    assert isinstance(open_probe(None), NullProbe)
    telemetry = summarize_telemetry(False, [Sample(1.0)], [NullProbe().state()])
    assert telemetry.available is False and telemetry.sm_clock_mhz is None
    assert NullProbe().read().throttle_reasons is None
