"""The nightly's suspicion test and the order and budget of its confirmations, as pure
functions, and the provisional tail of ``detect``."""

from __future__ import annotations

import numpy as np
import pytest

from kernelwatch.analysis.changepoints import detect
from kernelwatch.analysis.suspicion import Measured, newly_failing, schedule, suspect_timing
from kernelwatch.analysis.thresholds import ConfirmBudget, DetectorConfig, SuspicionThresholds
from kernelwatch.analysis.verdict import compare

RULES = SuspicionThresholds()


def _nights(n: int, noise: float = 0.01, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 1e6 * np.exp(rng.normal(0.0, noise, n))


def test_tonights_3x_point_is_suspected_and_an_ordinary_night_is_not():
    levels = _nights(8)
    assert suspect_timing(levels, RULES) is None
    slowed = np.append(levels, 3e6)
    found = suspect_timing(slowed, RULES)
    assert found is not None and found.start == 8 and found.points == 1
    assert found.direction == "regression" and found.z > 20
    faster = suspect_timing(np.append(levels, 0.5e6), RULES)
    assert faster is not None and faster.direction == "improvement"


def test_a_change_waiting_for_confirmation_stays_suspected_from_its_first_night():
    levels = np.append(_nights(8), [3e6, 3.05e6])
    found = suspect_timing(levels, RULES)
    assert found is not None and (found.start, found.points) == (8, 2)


def test_the_regime_starts_after_the_last_change_and_checked_noise_is_left_out():
    levels = np.append(_nights(8), [3e6, 3.02e6, 2.98e6, 3.01e6, 3.0e6])
    # The change at night 8 is known: the regime is nights 8..11, and tonight is in it.
    assert suspect_timing(levels, RULES, regime_start=8) is None
    # Too short a regime to judge: no suspicion, rather than a guess.
    assert suspect_timing(levels[:11], RULES, regime_start=8) is None
    # A point checked as noise is neither in the reference nor the start of a change.
    noisy = np.append(_nights(8), [3e6, 1e6])
    assert suspect_timing(noisy, RULES, checked={8}) is None
    assert suspect_timing(np.append(noisy, 3e6), RULES, checked={8}).start == 10


def test_newly_failing_is_pass_last_night_and_fail_or_error_tonight():
    last = {"a": "pass", "b": "fail", "c": "pass", "d": "pass"}
    tonight = {"a": "fail", "b": "fail", "c": "pass", "d": "error", "e": "fail"}
    assert newly_failing(last, tonight) == ["a", "d"]


def _verdict(ratio: float):
    rng = np.random.default_rng(1)
    a = 1000 * np.exp(rng.normal(0, 0.01, 40))
    return compare(a, a * ratio * np.exp(rng.normal(0, 0.01, 40)))


def test_the_budget_is_respected_the_most_severe_go_first_and_the_rest_are_listed():
    # Five suspects in four groups (kernels), each estimated at 10 s per A/B.
    suspects = [("k1", 1.2), ("k2", 3.0), ("k3", 1.05), ("k2", 2.0), ("k4", 1.5)]
    calls: list[tuple[str, list[int]]] = []

    def measure(group, members, round_):
        calls.append((group, list(members)))
        return Measured({i: _verdict(suspects[i][1]) for i in members}, 9.0)

    results = schedule(
        suspects,
        group=lambda s: s[0],
        severity=lambda s: s[1],
        estimate=lambda s: 10.0,
        measure=measure,
        budget=ConfirmBudget(budget_s=25.0, max_suspects=4),
    )
    # Severity order: k2 (3.0, and 2.0 with it: one A/B of two suspects, expected 20 s), k4,
    # k1; k3 is over the night's 4 most severe. After k2 (9 s spent) k4 fits (9 + 10 <= 25),
    # k1 would not (18 + 10 > 25).
    assert calls == [("k2", [1, 3]), ("k4", [4])]
    outcomes = [r.outcome for r in results]
    assert outcomes == ["unconfirmed", "regression", "unconfirmed", "regression", "regression"]
    assert "budget" in results[0].note and "most severe" in results[2].note
    assert sum(r.gpu_seconds for r in results) == pytest.approx(18.0)


def test_ambiguous_suspects_get_more_samples_within_the_budget():
    rounds: list[int] = []

    def measure(group, members, round_):
        rounds.append(round_)
        ratio = 1.01 if round_ == 0 else 1.5
        return Measured({i: _verdict(ratio) for i in members}, 1.0)

    ambiguous = _verdict(1.01)
    assert ambiguous.verdict == "AMBIGUOUS"
    (result,) = schedule(
        ["s"], lambda s: s, lambda s: 1.0, lambda s: 1.0, measure, ConfirmBudget(max_rounds=3)
    )
    assert rounds == [0, 1] and result.outcome == "regression" and result.rounds == 2
    rounds.clear()
    (waiting,) = schedule(
        ["s"], lambda s: s, lambda s: 1.0, lambda s: 1.0, measure, ConfirmBudget(max_rounds=1)
    )
    assert rounds == [0] and waiting.outcome == "waiting" and "waiting" in waiting.note


def test_detect_reports_a_clear_step_in_the_tail_as_provisional():
    base = _nights(50, seed=3)
    stepped = np.append(base, 1.1 * _nights(2, seed=4))
    (change,) = detect(stepped, DetectorConfig(), provisional=True).change_points
    assert change.provisional and change.index == 50 and change.direction == "regression"
    assert detect(stepped, DetectorConfig()).change_points == ()  # the scan alone: not yet
    # One point alone is an interference outlier as far as a series can tell.
    outlier = np.append(base, 1.1e6)
    assert detect(outlier, DetectorConfig(), provisional=True).change_points == ()
    # Once the scan can judge it, the change is settled: reported once, not provisional.
    settled = np.append(base, 1.1 * _nights(25, seed=4))
    (change,) = detect(settled, DetectorConfig(), provisional=True).change_points
    assert not change.provisional and abs(change.index - 50) <= 1
