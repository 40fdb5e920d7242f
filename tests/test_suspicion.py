"""The nightly's suspicion test and the order and budget of its confirmations, as pure
functions, and the provisional tail of ``detect``."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from kernelwatch.analysis.changepoints import detect
from kernelwatch.analysis.noise import relative_noise
from kernelwatch.analysis.suspicion import (
    Confirmed,
    Measured,
    newly_failing,
    schedule,
    suspect_timing,
)
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


@pytest.mark.parametrize("tonight", [math.nan, math.inf, 0.0, -3e6])
def test_a_night_that_is_no_timing_is_never_suspected(tonight):
    # A NaN or infinite level, or none at all, is a broken measurement, not a change: each
    # alone is refused, whatever the nights before it.
    assert suspect_timing(np.append(_nights(8), tonight), RULES) is None


def test_one_or_two_nights_are_too_few_to_judge():
    # Even at its smallest (2 nights of regime) a test needs both before tonight.
    least = SuspicionThresholds(min_history=2, history=2)
    assert suspect_timing([3e6], least) is None
    assert suspect_timing([1e6, 3e6], least) is None
    assert suspect_timing([1e6, 1e6, 3e6], least) is not None


def test_the_magnitude_is_the_log_ratio_of_tonight_to_the_regime_for_times_and_rates():
    # A time below one (seconds) is as valid a level as any: doubling it is a regression of
    # exactly log 2 against the regime's median.
    slower = suspect_timing([1e-4] * 4 + [2e-4], RULES)
    assert slower is not None and slower.direction == "regression"
    assert (slower.shift, slower.level) == pytest.approx((math.log(2.0), math.log(1e-4)))
    # A rate (higher is better) is judged on minus its log: half the rate is as much a
    # regression as twice the time, and twice the rate an improvement.
    drop = suspect_timing([100.0] * 4 + [50.0], RULES, lower_is_better=False)
    assert drop is not None and drop.direction == "regression"
    assert (drop.shift, drop.level) == pytest.approx((math.log(2.0), -math.log(100.0)))
    rise = suspect_timing([100.0] * 4 + [200.0], RULES, lower_is_better=False)
    assert rise is not None and rise.direction == "improvement"
    assert rise.shift == pytest.approx(-math.log(2.0))


def test_without_a_known_change_the_whole_series_is_the_regime():
    # min_history (4) nights before tonight are enough when no change is known: every night
    # from the first counts, and a regime starting one night later is too short to judge.
    levels = np.append(_nights(4), 3e6)
    found = suspect_timing(levels, RULES)
    assert found is not None and found.start == 4
    assert suspect_timing(levels, RULES, regime_start=1) is None


def test_the_noise_is_the_regimes_before_tonight_without_tonights_point():
    # Tonight's jump would inflate the noise it is judged against (and shrink its z): the
    # sigma is that of every night of the regime before tonight, and of those alone.
    levels = np.append(_nights(6), 3e6)
    found = suspect_timing(levels, RULES)
    assert found is not None
    expected = relative_noise(np.log(levels[:-1]))
    assert found.sigma == pytest.approx(expected, rel=1e-12)
    assert found.sigma != pytest.approx(relative_noise(np.log(levels)))
    assert found.z == pytest.approx(found.shift / expected)


def test_newly_failing_is_pass_last_night_and_fail_or_error_tonight():
    last = {"a": "pass", "b": "fail", "c": "pass", "d": "pass"}
    tonight = {"a": "fail", "b": "fail", "c": "pass", "d": "error", "e": "fail"}
    assert newly_failing(last, tonight) == ["a", "d"]


def test_newly_failing_compares_statuses_by_value_as_the_store_returns_them():
    # The database driver decodes each status into a new string, never the interned literal.
    last = {"a": b"pass".decode(), "b": b"fail".decode()}
    tonight = {"a": b"fail".decode(), "b": b"fail".decode()}
    assert newly_failing(last, tonight) == ["a"]


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


def _once(outcomes: dict[str, list[float]], seconds: float = 10.0, errors=None):
    """A measure callback giving suspect ``i`` the verdict of ratio ``outcomes[i][round]``
    (a missing round or suspect: no verdict) and recording each call."""
    calls: list[tuple[object, list[int], int]] = []

    def measure(group, members, round_):
        calls.append((group, list(members), round_))
        verdicts = {
            i: _verdict(outcomes[i][round_]) for i in members if round_ < len(outcomes.get(i, []))
        }
        return Measured(verdicts, seconds, errors or {})

    return measure, calls


def _schedule(suspects, measure, budget, estimate=10.0):
    return schedule(
        suspects,
        group=lambda s: s[0],
        severity=lambda s: s[1],
        estimate=lambda s: estimate,
        measure=measure,
        budget=budget,
    )


def test_a_confirmation_that_exactly_fills_the_budget_is_started():
    # Two kernels, each expected at 10 s and costing 10 s: a 20 s budget takes both.
    suspects = [("k1", 2.0), ("k2", 1.5)]
    measure, calls = _once({0: [1.5], 1: [1.5]})
    results = _schedule(suspects, measure, ConfirmBudget(budget_s=20.0))
    assert [c[0] for c in calls] == ["k1", "k2"]
    assert [r.outcome for r in results] == ["regression", "regression"]
    assert [(r.rounds, r.gpu_seconds) for r in results] == [(1, 10.0), (1, 10.0)]


def test_a_confirmation_past_the_budget_is_listed_with_what_was_spent():
    suspects = [("k1", 2.0), ("k2", 1.5)]
    measure, calls = _once({0: [1.5], 1: [1.5]})
    results = _schedule(suspects, measure, ConfirmBudget(budget_s=19.5))
    assert [c[0] for c in calls] == ["k1"]
    assert results[1] == Confirmed(
        ("k2", 1.5), None, 0, 0.0, "unconfirmed",
        "not confirmed: its A/B would take the night's 19.5 s budget over (10.0 s spent)",
    )  # fmt: skip
    # Nothing spent yet: the night starts at 0 s, and a 10 s A/B does not fit in 9.5 s.
    measure, calls = _once({0: [1.5]})
    (alone,) = _schedule(suspects[:1], measure, ConfirmBudget(budget_s=9.5))
    assert calls == [] and alone.note.endswith("(0.0 s spent)")


def test_suspects_over_the_nights_most_are_listed_unmeasured():
    suspects = [("k1", 1.1), ("k2", 2.0)]
    measure, calls = _once({1: [1.5]})
    low, high = _schedule(suspects, measure, ConfirmBudget(max_suspects=1))
    assert [c[0] for c in calls] == ["k2"] and high.outcome == "regression"
    assert low == Confirmed(
        ("k1", 1.1), None, 0, 0.0, "unconfirmed",
        "not confirmed: over the night's 1 most severe suspects",
    )  # fmt: skip


def test_each_later_round_costs_twice_and_measures_only_the_ambiguous():
    # One kernel, two suspects: round 0 settles the first (SLOWER) and leaves the second
    # AMBIGUOUS; round 1, expected at twice its 10 s (20 s), measures the second alone.
    suspects = [("k", 2.0), ("k", 1.5)]
    outcomes = {0: [1.5], 1: [1.01, 1.5]}
    measure, calls = _once(outcomes)
    first, second = _schedule(suspects, measure, ConfirmBudget(budget_s=30.0))
    assert calls == [("k", [0, 1], 0), ("k", [1], 1)]
    assert (first.outcome, first.rounds, first.gpu_seconds) == ("regression", 1, 5.0)
    assert (second.outcome, second.rounds, second.gpu_seconds) == ("regression", 2, 15.0)
    # 10 s spent and 20 s expected do not fit in 29 s: the ambiguous one waits for history.
    measure, calls = _once(outcomes)
    first, second = _schedule(suspects, measure, ConfirmBudget(budget_s=29.0))
    assert calls == [("k", [0, 1], 0)]
    assert (second.outcome, second.rounds, second.gpu_seconds) == ("waiting", 1, 5.0)
    assert second.verdict is not None and second.verdict.verdict == "AMBIGUOUS"
    assert second.note == second.verdict.reason + "; waiting for history"
    assert first.note == first.verdict.reason


def test_a_suspect_the_ab_could_not_measure_waits_with_the_reason():
    suspects = [("k", 2.0), ("k", 1.5)]
    measure, _ = _once({}, errors={0: "the kernel crashed"})
    crashed, silent = _schedule(suspects, measure, ConfirmBudget())
    assert crashed == Confirmed(
        ("k", 2.0), None, 1, 5.0, "waiting",
        "the A/B could not measure it (the kernel crashed); waiting for history",
    )  # fmt: skip
    assert silent.note == "the A/B could not measure it (no result); waiting for history"


def test_measurements_and_their_outcomes_are_immutable_records():
    measured = Measured({}, 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        measured.gpu_seconds = 0.0  # type: ignore[misc]
    confirmed = Confirmed("s", None, 0, 0.0, "unconfirmed", "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        confirmed.outcome = "regression"  # type: ignore[misc]


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
