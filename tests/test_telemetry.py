"""NVML telemetry through a fake NVML module: readings, throttling judged by the SM clock, the
slowdowns (seen or counted) and other processes on the GPU, the other reasons kept as
information, and never a crash."""

from __future__ import annotations

import dataclasses
import itertools
import os
import sys

import pytest
from fakegpu import (
    NVMLError,
    NVMLError_FunctionNotFound,
    NVMLLibraryMismatchError,
    fake_nvml,
    raising,
)

from kernelwatch.harness.timing.sampling import Sample
from kernelwatch.harness.timing.telemetry import (
    CLOCK_EVENT_REASONS,
    LOCKED_CLOCKS_REASON,
    SLOWDOWN_COUNTERS,
    ClockPolicy,
    NullProbe,
    Reading,
    State,
    Timed,
    describe_reasons,
    is_throttled,
    open_probe,
    sampled,
    summarize_telemetry,
)


def test_throttling_is_the_sm_clock_below_three_quarters_of_the_maximum():
    assert not is_throttled(1980.0, 1980.0)
    assert not is_throttled(1500.0, 1980.0)  # 76%: slower, but nvbench keeps it too
    assert is_throttled(1400.0, 1980.0)
    assert not is_throttled(None, 1980.0) and not is_throttled(1000.0, None)
    assert describe_reasons(0x24) == "sw-power-cap,sw-thermal-slowdown"
    assert describe_reasons(0x3) == "gpu-idle,applications-clocks"


def test_the_power_cap_bit_alone_does_not_drop_a_sample():
    """H100s and H200s run compute-bound work at their software power cap (0x4) at nearly
    full clock: such a sample counts, its reason kept as information; a sample whose clock
    fell to 1200 of 1980 MHz is throttled, whatever the bits say."""
    clocks = iter([1900.0, 1900.0, 1200.0, 1200.0])
    nvml = fake_nvml(sm_clock=lambda: next(clocks), reasons=lambda: 0x4)
    probe = open_probe("8d1f-aa", nvml)
    arm = sampled(lambda: Timed(1000.0), probe)
    capped, slow = arm(), arm()
    assert not capped.throttled and capped.throttle_reasons == 0x4
    assert slow.throttled and slow.sm_clock_mhz == 1200.0


# hw-slowdown, sw-thermal, hw-thermal, hw-power-brake
@pytest.mark.parametrize("bit", [0x8, 0x20, 0x40, 0x80])
def test_a_slowdown_over_the_sample_flags_it_whatever_the_clock(bit):
    """The slowdowns clamp the clock in bursts a clock read beside the sample can miss: a
    sample they touched is throttled even at full clock. The software power cap and sync
    boost stay information."""
    probe = open_probe("GPU-1", fake_nvml(reasons=lambda: bit | 0x4))
    sample = sampled(lambda: Timed(1000.0, sm_clock_mhz=1980.0), probe)()
    assert sample.throttled and sample.throttle_reasons == bit | 0x4
    quiet = open_probe("GPU-1", fake_nvml(reasons=lambda: 0x4 | 0x10))
    assert not sampled(lambda: Timed(1000.0, sm_clock_mhz=1980.0), quiet)().throttled


def test_the_clock_the_gpu_measured_decides_over_nvmls_snapshot():
    probe = open_probe("GPU-1", fake_nvml(sm_clock=lambda: 1980.0))
    sample = sampled(lambda: Timed(1000.0, sm_clock_mhz=1100.0), probe)()
    assert sample.throttled and sample.sm_clock_mhz == 1100.0


def test_reasons_are_read_over_the_sample_not_once_after_it():
    """A hardware slowdown in force when the sample started and cleared by the time it ended
    is still the sample's."""
    ran = []

    def take() -> Timed:
        ran.append(True)
        return Timed(1000.0)

    probe = open_probe("GPU-1", fake_nvml(reasons=lambda: 0x0 if ran else 0x8))
    assert sampled(take, probe)().throttle_reasons == 0x8


def test_probe_reads_by_uuid_and_summarises():
    nvml = fake_nvml(reasons=lambda: 0x1)
    probe = open_probe("8d1f-aa", nvml)
    assert probe.available and nvml.opened == ["GPU-8d1f-aa"]
    assert probe.max_sm_clock_mhz == 1980.0
    samples = [sampled(lambda: Timed(1000.0), probe)() for _ in range(3)]
    assert samples[0] == Sample(1000.0, 1980.0, 3201.0, 0x1, False, other_processes=0)
    state = probe.state()
    assert state == State(41.0, 350.5, 0)  # this process is the only one
    telemetry = summarize_telemetry(True, samples, [state, State(44.0, 300.0, 0)])
    assert telemetry.throttle_reasons == 0x1
    assert (telemetry.sm_clock_mhz, telemetry.mem_clock_mhz) == (1980.0, 3201.0)
    assert (telemetry.temperature_c, telemetry.power_w) == (44.0, 350.5)
    assert probe.policy() == ClockPolicy(1980.0, 700.0, True, None, None)


def test_a_driver_without_the_event_reasons_symbol_falls_back_to_the_old_name():
    """pynvml always has ``nvmlDeviceGetCurrentClocksEventReasons``; on an older driver
    calling it raises FunctionNotFound, which used to turn reasons off in silence."""
    nvml = fake_nvml(
        nvmlDeviceGetCurrentClocksEventReasons=raising(NVMLError_FunctionNotFound),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4,
    )
    probe = open_probe("GPU-1", nvml)
    assert probe.read().throttle_reasons == 0x4
    assert probe.read().throttle_reasons == 0x4


def test_a_library_mismatch_is_unknown_not_a_crash():
    """pynvml's NVMLLibraryMismatchError is not an NVMLError."""
    nvml = fake_nvml(
        nvmlDeviceGetComputeRunningProcesses=raising(NVMLLibraryMismatchError),
        nvmlDeviceGetMaxClockInfo=raising(NVMLLibraryMismatchError),
    )
    probe = open_probe("GPU-1", nvml)
    assert probe.state().other_processes is None
    assert probe.max_sm_clock_mhz is None
    assert not sampled(lambda: Timed(5.0, 100.0), probe)().throttled  # no reference: unknown
    broken_init = fake_nvml(nvmlInit=raising(NVMLLibraryMismatchError))
    assert isinstance(open_probe("GPU-1", broken_init), NullProbe)


def test_a_mig_slice_is_found_by_its_mig_uuid():
    nvml = fake_nvml(uuids=("MIG-5e2c-77",))
    probe = open_probe("5e2c-77", nvml)
    assert probe.available
    assert nvml.opened == ["GPU-5e2c-77", "MIG-5e2c-77"]


def test_unsupported_queries_are_unknown_not_errors():
    unsupported = raising(NVMLError)
    probe = open_probe(
        "GPU-1",
        fake_nvml(
            nvmlDeviceGetClockInfo=unsupported,
            nvmlDeviceGetCurrentClocksEventReasons=unsupported,
            nvmlDeviceGetTemperature=unsupported,
            nvmlDeviceGetPowerUsage=unsupported,
        ),
    )
    reading = probe.read()
    assert (reading.sm_clock_mhz, reading.mem_clock_mhz, reading.throttle_reasons) == (None,) * 3
    assert probe.state() == State(None, None, 0)
    assert not sampled(lambda: Timed(5.0), probe)().throttled
    empty = fake_nvml(nvmlDeviceGetComputeRunningProcesses=lambda h: [])
    assert open_probe("GPU-1", empty).state().other_processes is None


def test_no_nvml_means_unknown_telemetry():
    assert isinstance(open_probe("GPU-1", fake_nvml(nvmlInit=raising(NVMLError))), NullProbe)
    assert isinstance(open_probe("GPU-1", fake_nvml(uuids=())), NullProbe)
    assert isinstance(open_probe(None), NullProbe)
    telemetry = summarize_telemetry(False, [Sample(1.0)], [NullProbe().state()])
    assert telemetry.available is False and telemetry.sm_clock_mhz is None
    assert NullProbe().read().throttle_reasons is None
    assert NullProbe().policy() == ClockPolicy()


def test_readings_are_taken_before_and_after_every_sample():
    calls = itertools.count()
    probe = open_probe("GPU-1", fake_nvml(sm_clock=lambda: 1000.0 + next(calls)))
    sample = sampled(lambda: Timed(5.0), probe)()
    assert sample.sm_clock_mhz == 1000.0  # the lower of the two


@pytest.mark.parametrize("others", [1, 2])
def test_other_processes_and_a_fractional_power_limit_are_read_as_reported(others):
    nvml = fake_nvml(
        nvmlDeviceGetComputeRunningProcesses=lambda h: ["this"] + ["another"] * others,
        nvmlDeviceGetEnforcedPowerLimit=lambda h: 350_500,
    )
    probe = open_probe("GPU-1", nvml)
    assert probe.state().other_processes == others
    assert probe.policy().power_limit_w == 350.5
    telemetry = summarize_telemetry(True, [], [probe.state()])
    assert (telemetry.available, telemetry.other_processes) == (True, others)


def test_without_the_nvml_package_telemetry_is_unknown(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert isinstance(open_probe("GPU-1"), NullProbe)


@pytest.mark.parametrize("record", [Reading(), State(), ClockPolicy()])
def test_readings_are_immutable_records(record):
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.temperature_c = 1.0  # type: ignore[misc,union-attr]


def test_the_reason_bits_are_nvmls():
    import pynvml  # nvidia-ml-py, a dependency

    names = (
        "GpuIdle",
        "ApplicationsClocksSetting",
        "SwPowerCap",
        "HwSlowdown",
        "SyncBoost",
        "SwThermalSlowdown",
        "HwThermalSlowdown",
        "HwPowerBrakeSlowdown",
        "DisplayClockSetting",
    )
    bits = {getattr(pynvml, f"nvmlClocksEventReason{name}") for name in names}
    assert bits == set(CLOCK_EVENT_REASONS)
    assert pynvml.nvmlClocksEventReasonUserDefinedClocks == LOCKED_CLOCKS_REASON
    assert describe_reasons(0x6) == "applications-clocks,sw-power-cap"


def test_a_clock_at_exactly_three_quarters_of_the_maximum_is_not_throttled():
    assert not is_throttled(1485.0, 1980.0)  # nvbench flags below the threshold, not at it
    assert NullProbe().available is False


def test_a_slowdown_counted_between_the_readings_flags_the_sample():
    """A 40 us power brake inside the sample, over before NVML's reading after it: the
    instantaneous reasons read 0 on both sides, but the power brake's slowdown-time counter
    moved, so the sample is throttled and its reasons name the brake."""
    counters = {269: 5_000, 270: 0, 271: 1_000_000}

    def take() -> Timed:
        counters[271] += 40_000
        return Timed(1000.0, sm_clock_mhz=1980.0)

    probe = open_probe("GPU-1", fake_nvml(counters=lambda: dict(counters)))
    sample = sampled(take, probe)()
    assert sample.throttled and sample.throttle_reasons == 0x80
    still = sampled(lambda: Timed(1000.0, sm_clock_mhz=1980.0), probe)()
    assert not still.throttled and still.throttle_reasons == 0


def test_a_driver_without_the_slowdown_counters_is_asked_once():
    calls = []

    def unsupported(handle, ids):
        calls.append(ids)
        return fake_nvml().nvmlDeviceGetFieldValues(handle, ids)

    probe = open_probe("GPU-1", fake_nvml(nvmlDeviceGetFieldValues=unsupported))
    assert probe.read().slowdown_ns is None
    assert probe.read().slowdown_ns is None
    assert len(calls) == 1
    assert not sampled(lambda: Timed(1000.0, 1980.0), probe)().throttled


def test_the_slowdown_counters_are_nvmls_fields():
    import pynvml

    fields = {
        name: getattr(pynvml, f"NVML_FI_DEV_CLOCKS_EVENT_REASON_{name}")
        for name in ("SW_THERM_SLOWDOWN", "HW_THERM_SLOWDOWN", "HW_POWER_BRAKE_SLOWDOWN")
    }
    counted = {
        fields["SW_THERM_SLOWDOWN"]: pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        fields["HW_THERM_SLOWDOWN"]: pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        fields["HW_POWER_BRAKE_SLOWDOWN"]: pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
    }
    assert counted == SLOWDOWN_COUNTERS
    assert pynvml.NVML_SUCCESS == 0


def test_the_reasons_read_while_the_gpu_runs_the_sample_count():
    """What the timer read while the GPU was busy joins the readings before and after."""
    probe = open_probe("GPU-1", fake_nvml(reasons=lambda: 0x0))
    sample = sampled(lambda: Timed(1000.0, 1980.0, reasons=0x8 | 0x4), probe)()
    assert sample.throttled and sample.throttle_reasons == 0x8 | 0x4
    assert probe.read_reasons() == 0 and NullProbe().read_reasons() is None


def test_another_compute_process_during_a_sample_flags_it():
    """PID 4242 starts on the GPU while the sample runs: NVML lists it after the sample."""
    ran = []

    def take() -> Timed:
        ran.append(True)
        return Timed(1000.0, 1980.0)

    nvml = fake_nvml(processes=lambda: [os.getpid(), 4242] if ran else [os.getpid()])
    probe = open_probe("GPU-1", nvml)
    sample = sampled(take, probe)()
    assert sample.throttled and sample.other_processes == 1
    assert not sampled(take, open_probe("GPU-1", fake_nvml()))().throttled
    telemetry = summarize_telemetry(True, [sample], [State(41.0, 350.0, 0)] * 2)
    assert telemetry.other_processes == 1
