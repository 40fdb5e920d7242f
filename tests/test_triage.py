"""Triage rules: moves between states, auto-close on recovery, baseline resets."""

from __future__ import annotations

import numpy as np
import pytest

from kernelwatch.analysis.changepoints import detect
from kernelwatch.analysis.synthetic import make_series
from kernelwatch.analysis.triage_rules import (
    Triage,
    TriageError,
    auto_close,
    detection_start,
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


def test_a_baseline_reset_closes_alerts_up_to_it_and_moves_the_detection_start():
    closed = reset_baseline(Triage(), change_index=50, reset_at=50)
    assert closed.state == "wont_fix"
    assert "intended" in closed.notes[-1]
    assert reset_baseline(Triage(), change_index=80, reset_at=50).state == "untriaged"
    assert detection_start(120, [30, 50, 500]) == 50
    assert detection_start(120, []) == 0


def test_a_return_the_detector_missed_still_shows_in_the_recent_level():
    y = _regressed_then_fixed(1 / 1.08)
    regression = detect(y).change_points[0]
    assert recovery_index(y, regression, []) == len(y) - 6  # no later change point given
    assert recovery_index(_regressed_then_fixed(1 / 1.02), regression, []) is None
