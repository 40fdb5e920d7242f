"""The decision thresholds as a record: per-kernel overrides by name pattern, the first
matching block deciding, and values a record rejects refused when the record is made."""

from __future__ import annotations

import pytest

from kernelwatch.analysis.thresholds import (
    BisectThresholds,
    DetectorConfig,
    KernelOverride,
    StaticThresholds,
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


def test_records_reject_values_that_cannot_decide_anything():
    with pytest.raises(ValueError, match="resamples must be at least 1"):
        VerdictConfig(resamples=0)
    with pytest.raises(ValueError, match="min_effect must be in"):
        DetectorConfig(min_effect=1.5)
    assert StaticThresholds(0.0).max_instruction_growth == 0.0
