"""The decision thresholds as a record: per-kernel overrides by name pattern, the first
matching block deciding, and values a record rejects refused when the record is made."""

from __future__ import annotations

import dataclasses
import re

import pytest

from kernelwatch.analysis.thresholds import (
    BisectThresholds,
    ConfirmBudget,
    DetectorConfig,
    KernelOverride,
    StaticThresholds,
    SuspicionThresholds,
    Thresholds,
    VerdictConfig,
)

DEFAULTS = Thresholds(detection=DetectorConfig(alpha=1e-3))
ATTENTION = KernelOverride(("flash_attention_fp8",), {"verdict": {"margin": 0.05}})
ANY_ATTENTION = KernelOverride(
    ("*attention*", "sdpa"), {"verdict": {"margin": 0.02}, "bisect": {"bad_fraction": 0.2}}
)
SHIELD = KernelOverride(("flash_attention_bwd",))


def test_a_kernel_no_block_matches_gets_the_defaults():
    thresholds = Thresholds(DEFAULTS.detection, overrides=(ANY_ATTENTION,))
    assert thresholds.for_kernel("gemm") == Thresholds(DEFAULTS.detection)


def test_the_first_matching_block_decides_and_blocks_are_not_combined():
    thresholds = Thresholds(DEFAULTS.detection, overrides=(SHIELD, ATTENTION, ANY_ATTENTION))
    fp8 = thresholds.for_kernel("flash_attention_fp8")
    assert fp8.verdict.margin == 0.05
    assert fp8.bisect == BisectThresholds()  # ANY_ATTENTION's bad_fraction is not merged in
    assert fp8.detection.alpha == 1e-3  # the file's defaults stay under an override
    fwd = thresholds.for_kernel("flash_attention_fwd")
    assert (fwd.verdict.margin, fwd.bisect.bad_fraction) == (0.02, 0.2)
    assert thresholds.for_kernel("sdpa").verdict.margin == 0.02
    # A block with no values pins a kernel to the defaults ahead of broader patterns.
    assert thresholds.for_kernel("flash_attention_bwd").verdict == VerdictConfig()
    assert thresholds.for_kernel("Flash_Attention_fwd").verdict == VerdictConfig()
    assert fp8.overrides == ()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"verdict": {"alpha": 2.0}}, r"alpha must be in \(0, 1\)"),
        ({"bisect": {"bad_fraction": 1.0}}, r"bad_fraction must be in \[0, 1\)"),
        ({"static": {"max_instruction_growth": -0.1}}, "max_instruction_growth must be"),
        ({"detection": {"window": 3}}, r"window must be at least min_size \(6\)"),
        ({"timing": {}}, "unknown threshold sections"),
    ],
)
def test_an_override_a_record_rejects_is_refused_when_made(values, message):
    with pytest.raises(ValueError, match=message):
        Thresholds(overrides=(KernelOverride(("gemm",), values),))


# Each validated field at its limits, the records' refusals of values that cannot decide
# anything: the values it accepts at the edge and the values it refuses just past it, with
# the message that names the field and the value. Past an exclusive edge a refused list also
# holds a value further out, which a slip from `<` to `!=` would let through (a negative
# alpha, a bad_fraction above 1).
OPEN_UNIT = ((1e-9, 1.0 - 1e-9), (-0.5, 0.0, 1.0, 1.5))
AT_LEAST_ZERO = ((0.0,), (-1e-9,))
ABOVE_ZERO = ((1e-9,), (-1.0, 0.0))
LIMITS = [
    (DetectorConfig, "alpha", *OPEN_UNIT, "alpha must be in (0, 1)"),
    (DetectorConfig, "min_size", (1,), (0,), "min_size must be at least 1"),
    (DetectorConfig, "window", (6,), (5,), "window must be at least min_size (6)"),
    (DetectorConfig, "min_magnitude", *AT_LEAST_ZERO, "min_magnitude must be at least 0"),
    (DetectorConfig, "noise_factor", *AT_LEAST_ZERO, "noise_factor must be at least 0"),
    (DetectorConfig, "min_effect", (0.0, 1.0), (-1e-9, 1.0 + 1e-9), "min_effect must be in [0, 1]"),
    (
        DetectorConfig,
        "tail_points",
        (0, 2, 5),
        (-1, 1, 6, 7),
        "tail_points must be 0 or in [2, min_size)",
    ),
    (DetectorConfig, "tail_z", *ABOVE_ZERO, "tail_z must be above 0"),
    (VerdictConfig, "margin", *AT_LEAST_ZERO, "margin must be at least 0"),
    (VerdictConfig, "alpha", *OPEN_UNIT, "alpha must be in (0, 1)"),
    (VerdictConfig, "confidence", *OPEN_UNIT, "confidence must be in (0, 1)"),
    (VerdictConfig, "resamples", (1,), (0,), "resamples must be at least 1"),
    (
        BisectThresholds,
        "bad_fraction",
        (0.0, 1.0 - 1e-9),
        (-1e-9, 1.0, 1.5),
        "bad_fraction must be in [0, 1)",
    ),
    (
        StaticThresholds,
        "max_instruction_growth",
        *AT_LEAST_ZERO,
        "max_instruction_growth must be at least 0",
    ),
    (SuspicionThresholds, "z", *ABOVE_ZERO, "z must be above 0"),
    (SuspicionThresholds, "min_change", *AT_LEAST_ZERO, "min_change must be at least 0"),
    (SuspicionThresholds, "min_history", (2,), (1,), "min_history must be at least 2"),
    (SuspicionThresholds, "history", (4,), (3,), "history must be at least min_history (4)"),
    (SuspicionThresholds, "max_tail", (1,), (0,), "max_tail must be at least 1"),
    (ConfirmBudget, "budget_s", *AT_LEAST_ZERO, "budget_s must be at least 0"),
    (ConfirmBudget, "max_suspects", (0,), (-1,), "max_suspects must be at least 0"),
    (ConfirmBudget, "max_rounds", (1,), (0,), "max_rounds must be at least 1"),
]
# A regime of one point leaves no room for a provisional tail of two.
HELD = {(DetectorConfig, "min_size"): {"tail_points": 0}}


def _record(record: type, name: str, value: object) -> object:
    return record(**HELD.get((record, name), {}), **{name: value})


@pytest.mark.parametrize(
    ("record", "name", "value"),
    [(record, name, value) for record, name, ok, _, _ in LIMITS for value in ok],
)
def test_a_record_accepts_the_edge_of_each_field(record, name, value):
    assert getattr(_record(record, name, value), name) == value


@pytest.mark.parametrize(
    ("record", "name", "value", "message"),
    [(record, name, value, message) for record, name, _, bad, message in LIMITS for value in bad],
)
def test_a_record_refuses_each_field_just_past_its_edge(record, name, value, message):
    with pytest.raises(ValueError, match=re.escape(f"{message}, got {value}")):
        _record(record, name, value)


RECORDS = (
    DetectorConfig,
    VerdictConfig,
    BisectThresholds,
    StaticThresholds,
    SuspicionThresholds,
    ConfirmBudget,
)


@pytest.mark.parametrize("record", RECORDS)
def test_every_record_accepts_its_own_defaults_and_cannot_be_changed_after(record):
    made = record()
    name = dataclasses.fields(made)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(made, name, getattr(made, name))


def test_overrides_and_the_whole_record_cannot_be_changed_after_either():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ATTENTION.kernels = ("gemm",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        DEFAULTS.overrides = (ATTENTION,)


def test_the_records_judge_times_unless_told_otherwise():
    # Not a key of the file (config/threshold_tables.py), so docs/CONFIG.md does not pin it.
    assert DetectorConfig().lower_is_better
    assert VerdictConfig().lower_is_better
