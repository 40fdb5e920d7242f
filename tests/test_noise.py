"""The robust noise estimate: the median absolute deviation of first differences, scaled to
the sigma of the points, checked against values worked out by hand and against the known
sigma of a Gaussian series."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from kernelwatch.analysis.noise import relative_noise

# A normal sigma is the MAD over the normal quantile at 3/4, and a difference of two
# independent points has sqrt(2) times the points' sigma.
SIGMA_PER_MAD_OF_DIFFS = 1.0 / NormalDist().inv_cdf(0.75) / math.sqrt(2.0)


@pytest.mark.parametrize(
    ("series", "mad"),
    [
        # Differences 1, 2, 1, 3: median 1.5, absolute deviations 0.5, 0.5, 0.5, 1.5.
        ([0.0, 1.0, 3.0, 4.0, 7.0], 0.5),
        # The same ten times larger and shifted: the estimate scales with the spread alone.
        ([100.0, 110.0, 130.0, 140.0, 170.0], 5.0),
        # Three points, two differences 0.2 and -0.1: median 0.05, both 0.15 away from it.
        ([1.0, 1.2, 1.1], 0.15),
    ],
)
def test_the_noise_is_the_scaled_mad_of_the_first_differences(series, mad):
    assert relative_noise(np.array(series)) == pytest.approx(mad * SIGMA_PER_MAD_OF_DIFFS, rel=1e-4)


@pytest.mark.parametrize("series", [[], [1.0], [1.0, 1.5]])
def test_fewer_than_two_differences_have_no_spread_to_measure(series):
    assert relative_noise(np.array(series)) == 0.0


SIGMA = 0.03
POINTS = 20_000


def _gaussian(drift_per_point: float) -> np.ndarray:
    noise = np.random.default_rng(7).normal(0.0, SIGMA, POINTS)
    return 2.0 + drift_per_point * np.arange(POINTS) + noise


def test_on_a_gaussian_series_the_estimate_is_its_sigma():
    assert relative_noise(_gaussian(0.0)) == pytest.approx(SIGMA, rel=0.03)


def test_drift_and_a_step_barely_move_the_estimate():
    drifting = _gaussian(SIGMA / 3)
    drifting[POINTS // 2 :] += 10 * SIGMA
    assert relative_noise(drifting) == pytest.approx(SIGMA, rel=0.03)
