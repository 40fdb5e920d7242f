"""Triage rules: moves between states, auto-close on recovery, baseline resets."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic_series import make_series

from kernelwatch.analysis.changepoints import ChangePoint, detect
from kernelwatch.analysis.triage_rules import (
    Triage,
    TriageError,
    auto_close,
    move,
    recovery_index,
    reset_baseline,
)


def test_people_move_an_alert_through_the_open_states_and_close_it():
    t = move(Triage(), "acknowledged", assignee="ana")
    t = move(t, "investigating", note="bisecting", bug="https://bugs/1")
    t = move(t, "false_positive", note="noisy node")
    assert (t.state, t.assignee, t.bug, t.notes) == (
        "false_positive",
        "ana",
        "https://bugs/1",
        ("bisecting", "noisy node"),
    )
    assert move(t, "untriaged").state == "untriaged"


def test_forbidden_moves_name_the_allowed_ones():
    with pytest.raises(TriageError, match="allowed: untriaged"):
        move(Triage(state="fixed"), "investigating")
    with pytest.raises(TriageError, match="unknown state"):
        move(Triage(), "closed")  # type: ignore[arg-type]


def _regressed_then_fixed(revert: float) -> np.ndarray:
    rng = np.random.default_rng(3)
    y = make_series(rng, 150, 0, jitter=0.005).y
    y[50:] *= 1.08
    y[100:] *= revert
    return y


def test_an_alert_closes_itself_when_the_series_recovers():
    y = _regressed_then_fixed(1 / 1.08)
    regression, later = detect(y).change_points
    assert regression.direction == "regression"
    at = recovery_index(y, regression, [later])
    assert at is not None and abs(at - 100) <= 2
    closed = auto_close(Triage(state="acknowledged"), at)
    assert closed.state == "fixed"
    assert "recovered" in closed.notes[-1]
    assert auto_close(Triage(state="wont_fix"), at).state == "wont_fix"


def test_a_partial_fix_does_not_close_the_alert():
    y = _regressed_then_fixed(1 / 1.02)
    points = detect(y).change_points
    assert recovery_index(y, points[0], points[1:]) is None
    assert auto_close(Triage(), None).state == "untriaged"


def test_a_baseline_reset_closes_alerts_up_to_it():
    closed = reset_baseline(Triage(), change_index=50, reset_at=50)
    assert closed.state == "wont_fix"
    assert "intended" in closed.notes[-1]
    assert reset_baseline(Triage(), change_index=80, reset_at=50).state == "untriaged"


def test_a_return_the_detector_missed_still_shows_in_the_recent_level():
    y = _regressed_then_fixed(1 / 1.08)
    regression = detect(y).change_points[0]
    assert recovery_index(y, regression, []) == len(y) - 6  # no later change point given
    assert recovery_index(_regressed_then_fixed(1 / 1.02), regression, []) is None


def _cp(index: int, magnitude_pct: float = 20.0) -> ChangePoint:
    return ChangePoint(index, "regression", magnitude_pct, 1e-9, 1.0, "code")


def _levels(*runs: tuple[int, float]) -> np.ndarray:
    """A noiseless series: ``(points, level)`` runs, one after the other."""
    return np.concatenate([np.full(n, level) for n, level in runs])


# A 20 % regression: the tolerance is half its size in log space, log(1.2) / 2.
TOLERANCE = float(np.log(1.2) / 2)


# A recovery check without the recent-level check took the median of no points (numpy's
# "Mean of empty slice"): an error here.
@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize(("share", "recovered"), [(0.995, True), (1.005, False)])
def test_a_return_is_judged_against_half_the_change_in_log_space(share, recovered):
    back = float(np.exp(share * TOLERANCE))  # the level after the fix, relative to before
    y = _levels((20, 1.0), (10, 1.2), (20, back))
    assert recovery_index(y, _cp(20), [_cp(30, -10.0)], recent=0) == (30 if recovered else None)


def test_the_baseline_is_the_level_since_the_previous_change_not_the_start():
    # The series stepped from 2.0 to 1.0 at point 10 before regressing at 20; it is back at
    # 1.0 from point 30. The levels before point 10 are not this change's baseline.
    y = _levels((10, 2.0), (10, 1.0), (10, 1.2), (20, 1.0))
    every = [_cp(10, -50.0), _cp(20), _cp(30, -17.0)]  # the series' change points, itself too
    assert recovery_index(y, _cp(20), every, recent=0) == 30


def test_a_baseline_of_two_points_starts_at_the_first():
    # Change at point 2 with no earlier change point: the baseline is the median of points 0
    # and 1 (1.049 in log space), and a return to 1.02 is within the 10 % change's tolerance
    # (log(1.1) / 2) of that; from point 1 alone (1.1) it would not be.
    y = _levels((1, 1.0), (1, 1.1), (10, 1.16), (10, 1.02))
    assert recovery_index(y, _cp(2, 10.0), [_cp(12, -12.0)], recent=0) == 12


def test_a_partial_fix_then_a_full_one_recovers_at_the_full_one():
    # Later change points at 30 (half way back) and 40 (back): each later regime is judged on
    # its own points, so the mix of both from 30 on does not count as recovered at 30.
    y = _levels((20, 1.0), (10, 1.2), (10, 1.1), (20, 1.0))
    later = [_cp(30, -8.0), _cp(40, -9.0)]
    assert recovery_index(y, _cp(20), later, recent=0) == 40


def test_the_recent_level_counts_only_when_it_lies_wholly_after_the_change():
    y = _levels((34, 1.0), (6, 1.0))
    assert recovery_index(y, _cp(33), [], recent=6) == 34
    # The last six points start at the change itself: nothing after it to judge.
    assert recovery_index(y, _cp(34), [], recent=6) is None
    # A change two points from the end: the last six are mostly from before it, and their
    # median (the old level) says nothing about a return.
    regressed = _levels((38, 1.0), (2, 1.2))
    assert recovery_index(regressed, _cp(38), [], recent=6) is None


def test_a_reset_after_the_change_closes_it_and_a_reset_before_leaves_it_open():
    assert reset_baseline(Triage(), change_index=40, reset_at=50).state == "wont_fix"
    assert reset_baseline(Triage(), change_index=51, reset_at=50).state == "untriaged"
    closed = move(Triage(), "fixed")
    assert reset_baseline(closed, change_index=40, reset_at=50) == closed
