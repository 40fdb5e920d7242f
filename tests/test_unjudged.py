"""A night's point too wide to judge (issue 47): the rule (``analysis/suspicion.py``'s
``too_wide``) and the choice between a point and its re-measurement (``flows/pipeline.py``'s
``judged``); the nightly end to end is in tests/test_flows.py."""

from __future__ import annotations

import dataclasses
import math

import pytest
from factories import CASE, measurement

from kernelwatch.analysis.suspicion import too_wide
from kernelwatch.analysis.thresholds import KernelOverride, Thresholds
from kernelwatch.flows.pipeline import judged, wide_kernels


@pytest.mark.parametrize(
    "half, wide",
    [
        (None, False),
        (0.0, False),
        (0.02, False),
        (0.0201, True),
        (math.inf, True),
        (math.nan, True),
    ],
)
def test_a_point_is_too_wide_when_its_ci_exceeds_the_margin(half, wide):
    assert too_wide(half, 0.02) is wide


def _point(half: float, median: float = 1000.0, kernel: str = "rms_norm", dtype: str = "fp16"):
    m = measurement(dataclasses.replace(CASE, kernel=kernel, dtype=dtype))
    summary = dataclasses.replace(m.summary, median_ns=median, rel_ci_halfwidth=half)
    return dataclasses.replace(m, summary=summary)


def test_the_narrower_measurement_is_the_nights_point_and_a_still_wide_one_is_unjudged():
    thresholds = Thresholds()  # margin: [confirm] min_change = 2%
    first = [_point(0.30, 3000.0), _point(0.01, dtype="fp32"), _point(0.40, kernel="softmax")]
    assert wide_kernels(first, thresholds) == ("rms_norm", "softmax")
    again = [_point(0.015, 1000.0), _point(0.50, kernel="softmax")]
    night = judged(first, again, thresholds)
    assert [(m.case.kernel, m.summary.median_ns, m.unjudged) for m in night] == [
        ("rms_norm", 1000.0, False),  # measured again, narrow: judged at the second point
        ("rms_norm", 1000.0, False),  # narrow from the start (fp32)
        ("softmax", 1000.0, True),  # wider again: the first kept, unjudged
    ]
    assert night[2].summary.rel_ci_halfwidth == 0.40


def test_no_remeasurement_leaves_a_wide_point_unjudged_and_errors_alone():
    error = dataclasses.replace(measurement(), status="error", summary=None)
    night = judged([_point(0.30), error], [], Thresholds())
    assert [m.unjudged for m in night] == [True, False]


def test_each_kernel_is_judged_by_its_own_margin():
    loose = Thresholds(overrides=(KernelOverride(("softmax",), {"confirm": {"min_change": 0.5}}),))
    first = [_point(0.30), _point(0.30, kernel="softmax")]
    assert wide_kernels(first, loose) == ("rms_norm",)
    assert [m.unjudged for m in judged(first, [], loose)] == [True, False]
