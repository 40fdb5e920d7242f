"""One alert per culprit across many series."""

from __future__ import annotations

import numpy as np

from kernelwatch.analysis.changepoints import ChangePoint, detect
from kernelwatch.analysis.grouping import Regression, group, place
from kernelwatch.analysis.synthetic import make_series


def test_one_planted_culprit_across_twenty_series_is_one_alert():
    culprit = 140  # position in commit order of the bad commit
    regressions = []
    for seed in range(20):
        rng = np.random.default_rng(seed)
        # Each series was measured on its own subset of commits (every 1-3 commits).
        positions = np.cumsum(rng.integers(1, 4, 120))
        positions += culprit - positions[60]
        # No throttling bursts: a burst right before the step pulls its location off; in
        # production the clocks expose the burst (cycle space).
        y = make_series(rng, 120, 0, jitter=0.01, bursts=False).y
        y[positions >= culprit] *= 1 + rng.uniform(0.05, 0.15)
        changes = detect(y).change_points
        assert len(changes) == 1, f"series {seed}: {changes}"
        regressions.append(place(f"shape-{seed}", changes[0], positions.tolist()))
    [alert] = group(regressions)
    assert alert.direction == "regression"
    assert alert.after < culprit <= alert.until
    assert len(alert.series) == 20


def _regression(series: str, last_good: int, first_bad: int, direction: str = "regression"):
    return Regression(series, last_good, first_bad, direction, 5.0)  # type: ignore[arg-type]


def test_separate_culprits_and_directions_make_separate_alerts():
    alerts = group(
        [
            _regression("a", 10, 12),
            _regression("b", 11, 14),
            _regression("c", 40, 42),
            _regression("d", 10, 12, "improvement"),
        ]
    )
    assert [(a.direction, a.after, a.until, a.series) for a in alerts] == [
        ("improvement", 10, 12, ("d",)),
        ("regression", 10, 13, ("a", "b")),
        ("regression", 40, 42, ("c",)),
    ]


def test_place_widens_the_range_by_the_slack():
    change = ChangePoint(5, "regression", 4.0, 1e-6, 0.9, "unknown")
    positions = list(range(0, 100, 10))
    r = place("s", change, positions, slack=1)
    assert (r.last_good, r.first_bad) == (30, 60)
    assert place("s", change, positions, slack=0).last_good == 40
