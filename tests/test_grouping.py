"""One alert per culprit across many series."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from synthetic_series import make_series

from kernelwatch.analysis.changepoints import ChangePoint, detect
from kernelwatch.analysis.grouping import Regression, group, place


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


def _change(index: int, direction: str = "regression", magnitude: float = 4.0) -> ChangePoint:
    return ChangePoint(index, direction, magnitude, 1e-6, 0.9, "unknown")  # type: ignore[arg-type]


def test_place_clamps_the_slack_at_both_ends_of_the_series():
    positions = [3, 7, 12, 20, 31]
    assert place("s", _change(1), positions) == Regression("s", 3, 20, "regression", 4.0)
    assert place("s", _change(4), positions) == Regression("s", 7, 31, "regression", 4.0)
    assert place("s", _change(5), [*positions, 40]).first_bad == 40  # an even count too
    # The default slack is two points either side.
    middle = place("s", _change(2), positions)
    assert (middle.last_good, middle.first_bad) == (3, 31)


@pytest.mark.parametrize("index", [0, 5, 6, -1])
def test_a_change_at_the_first_point_or_outside_the_series_is_refused(index):
    # A change needs a point before it: index 0 has no "before", 5 is past the last point.
    with pytest.raises(ValueError, match=f"change index {index} is outside the series' 5"):
        place("s", _change(index), [3, 7, 12, 20, 31])


def test_ranges_that_only_touch_are_separate_culprits_and_one_that_overlaps_joins():
    touching = group([_regression("a", 10, 20), _regression("b", 20, 30)])
    assert [(a.after, a.until, a.series) for a in touching] == [(10, 20, ("a",)), (20, 30, ("b",))]
    overlapping = group([_regression("a", 10, 20), _regression("b", 19, 30)])
    assert [(a.after, a.until, a.series) for a in overlapping] == [(14, 25, ("a", "b"))]


def test_a_group_whose_median_range_is_empty_names_its_members_whole_span():
    # A night without new commits measures the same commit again, so a series can hold two
    # points at one position and a change between them has an empty range. Medians of the
    # ends: after = median(290, 300, 300) = 300, until = median(300, 310, 300) = 300, which
    # names no commit: the alert falls back to the members' full span. (Positions past 256
    # are not cached ints: an identity test would miss the equality.)
    members = [_regression("a", 300, 300), _regression("b", 290, 310), _regression("c", 300, 300)]
    [alert] = group(members)
    assert (alert.after, alert.until) == (290, 310)


def test_an_alert_keeps_its_members_direction_and_worst_change():
    improvements = [
        Regression("a", 10, 14, "improvement", -3.0),
        Regression("b", 11, 15, "improvement", -9.0),
        Regression("c", 12, 16, "improvement", 2.0),
    ]
    [alert] = group(improvements)
    assert alert.direction == "improvement"
    assert alert.worst_magnitude_pct == -9.0
    only_regressions = group([*improvements, _regression("d", 12, 16)])
    assert [(a.direction, a.series) for a in only_regressions] == [
        ("improvement", ("a", "b", "c")),
        ("regression", ("d",)),
    ]


def test_records_are_immutable():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _regression("a", 1, 2).first_bad = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        group([_regression("a", 1, 2)])[0].until = 3  # type: ignore[misc]
