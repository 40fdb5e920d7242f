"""A robust per-series noise estimate, used to scale the minimum magnitude worth reporting."""

from __future__ import annotations

import numpy as np

# Scale from the median absolute deviation to a normal sigma.
_MAD_TO_SIGMA = 1.4826


def relative_noise(log_values: np.ndarray) -> float:
    """The point-to-point noise of a series, as a relative (log-space) sigma.

    Estimated from first differences, so steps and slow drift barely move it (a step adds one
    large difference, drift a tiny bias to all), and from their median absolute deviation, so
    interference outliers and throttling bursts do not inflate it. Differences of independent
    points have twice the variance of the points, hence the square root of two.
    """
    diffs = np.diff(np.asarray(log_values, dtype=float))
    if diffs.size < 2:
        return 0.0
    mad = float(np.median(np.abs(diffs - np.median(diffs))))
    return _MAD_TO_SIGMA * mad / np.sqrt(2.0)
