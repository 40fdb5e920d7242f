"""Settling a PR check's inconclusive cases (``analysis/settling.py``): the kernels of
AMBIGUOUS cases are timed again with twice the samples a round, a static change first, within
a device-time budget and a number of rounds; what is left says why."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from factories import CASE, DEVICE, METHOD, SOFTWARE, measurement

from kernelwatch.analysis.settling import case_name, settle, verdict
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.harness.records import ABMeasurement

THRESHOLDS = Thresholds()
#: Per kernel: the head's true ratio to the base. 4% slower is AMBIGUOUS at 8 samples of 5%
#: noise and SLOWER with more; 1.01 sits on the 1% margin, AMBIGUOUS at any count.
RATIOS = {"slow": 1.04, "fast": 0.95, "edge": 1.01, "same": 1.0, "much_slower": 1.5}
FIRST_SAMPLES = 8
NOISE = 0.05


def _pair(kernel: str, round_: int, seed: int) -> ABMeasurement:
    case = replace(CASE, kernel=kernel)
    n = FIRST_SAMPLES * 2**round_
    rng = np.random.default_rng(seed)
    noise = 0.002 if kernel == "same" else NOISE  # a quiet case: SAME at the first round
    a = 1000.0 * np.exp(rng.normal(0.0, noise, n))
    b = RATIOS[kernel] * 1000.0 * np.exp(rng.normal(0.0, noise, n))
    if kernel == "edge":  # the same samples scaled: the interval always holds the margin
        b = a * RATIOS[kernel]
    sides = {"base": measurement(case, a), "head": measurement(case, b)}
    # 3 s of device time at the first round, twice that at each later one
    return ABMeasurement(case, "ok", "", METHOD, DEVICE, SOFTWARE, **sides, duration_s=3 * n / 8)


class Device:
    """The A/B stage: records what it was asked, times each asked kernel's case."""

    def __init__(self) -> None:
        self.asked: list[tuple[tuple[str, ...], int]] = []

    def measure(self, kernels: tuple[str, ...], round_: int) -> list[ABMeasurement]:
        self.asked.append((kernels, round_))
        return [_pair(k, round_, seed=7 * len(self.asked) + i) for i, k in enumerate(kernels)]


def _first(*kernels: str) -> list[ABMeasurement]:
    return [_pair(k, 0, seed=i) for i, k in enumerate(kernels)]


def _verdicts(pairs) -> dict[str, str]:
    return {p.case.kernel: verdict(p, THRESHOLDS).verdict for p in pairs}


def test_an_ambiguous_slowdown_gets_more_samples_until_it_is_slower():
    pairs = _first("slow", "same", "much_slower")
    assert _verdicts(pairs) == {"slow": "AMBIGUOUS", "same": "SAME", "much_slower": "SLOWER"}
    device = Device()
    settled = settle(pairs, device.measure, THRESHOLDS, budget_s=100.0, max_rounds=3)
    assert _verdicts(settled.pairs)["slow"] == "SLOWER"
    # only the inconclusive kernel was timed again, each round with twice the samples
    assert [kernels for kernels, _ in device.asked] == [("slow",)] * settled.rounds
    assert [r for _, r in device.asked] == list(range(1, settled.rounds + 1))
    assert settled.resolved == (case_name(pairs[0].case),) and settled.unsettled == ()
    assert settled.device_s == sum(3 * 2**r for r in range(1, settled.rounds + 1))
    # the cases nobody doubted are the first round's, in the order given
    assert settled.pairs[1:] == tuple(pairs[1:])
    assert "settled by up to" in settled.notes()[0]


def test_a_case_on_the_margin_is_left_inconclusive_after_the_last_round():
    device = Device()
    settled = settle(_first("edge"), device.measure, THRESHOLDS, budget_s=1e6, max_rounds=2)
    assert settled.rounds == 2 and len(device.asked) == 2
    assert settled.out_of_rounds == (case_name(replace(CASE, kernel="edge")),)
    assert settled.out_of_budget == () and settled.resolved == ()
    assert any("after the last round" in note for note in settled.notes())


def test_the_budget_stops_a_round_it_cannot_pay_for_and_says_so():
    pairs = _first("slow")  # its first round took 3 s: the next costs about 6
    device = Device()
    settled = settle(pairs, device.measure, THRESHOLDS, budget_s=5.0, max_rounds=3)
    assert device.asked == [] and settled.rounds == 0 and settled.pairs == tuple(pairs)
    assert settled.out_of_budget == (case_name(pairs[0].case),)
    assert settled.notes() == (
        "left inconclusive by the device-time budget ([pr] device_seconds): "
        + case_name(pairs[0].case),
    )
    # a budget of exactly one round's cost pays for it, and nothing after
    device = Device()
    settled = settle(pairs, device.measure, THRESHOLDS, budget_s=6.0, max_rounds=3)
    assert device.asked == [(("slow",), 1)] and settled.device_s == 6.0


def test_a_kernel_with_a_static_change_is_settled_first_when_only_one_fits():
    pairs = _first("edge", "slow", "fast")  # all AMBIGUOUS; "fast" the farthest from 1
    assert set(_verdicts(pairs).values()) == {"AMBIGUOUS"}
    device = Device()
    settled = settle(pairs, device.measure, THRESHOLDS, budget_s=7.0, max_rounds=1,
                     changed={"edge"})  # fmt: skip
    assert device.asked == [(("edge",), 1)]
    assert settled.out_of_budget == tuple(case_name(p.case) for p in pairs[1:])
    # without the static change the farthest ratio goes first, a faster one included
    device = Device()
    settle(pairs, device.measure, THRESHOLDS, budget_s=13.0, max_rounds=1)
    assert device.asked == [(("fast", "slow"), 1)]


def test_a_case_an_extra_round_made_doubtful_is_not_counted_as_settled():
    """A kernel's every case is timed again: one that was clear and is AMBIGUOUS after its
    kernel's extra round is left inconclusive, not listed among the settled."""
    doubted, clear = replace(CASE, params={"rows": 1}), replace(CASE, params={"rows": 2})

    def pair(case, ratio, n, seed):
        rng = np.random.default_rng(seed)
        a = 1000.0 * np.exp(rng.normal(0.0, 0.002, n))
        sides = {"base": measurement(case, a), "head": measurement(case, ratio * a)}
        return ABMeasurement(case, "ok", "", METHOD, DEVICE, SOFTWARE, **sides, duration_s=1.0)

    first = [pair(doubted, 1.01, 8, 1), pair(clear, 1.0, 8, 2)]  # on the margin, and SAME
    again = [pair(doubted, 1.5, 16, 3), pair(clear, 1.01, 16, 4)]  # SLOWER, and on the margin
    assert [verdict(p, THRESHOLDS).verdict for p in first] == ["AMBIGUOUS", "SAME"]
    assert [verdict(p, THRESHOLDS).verdict for p in again] == ["SLOWER", "AMBIGUOUS"]
    settled = settle(first, lambda kernels, round_: again, THRESHOLDS, 100.0, max_rounds=1)
    assert settled.resolved == (case_name(doubted),)
    assert settled.out_of_rounds == (case_name(clear),) and settled.out_of_budget == ()


def test_nothing_inconclusive_or_no_rounds_allowed_times_nothing_and_notes_nothing():
    device = Device()
    clear = _first("same", "much_slower")
    settled = settle(clear, device.measure, THRESHOLDS, budget_s=100.0, max_rounds=3)
    assert device.asked == [] and settled.pairs == tuple(clear) and settled.notes() == ()
    ambiguous = _first("slow")
    settled = settle(ambiguous, device.measure, THRESHOLDS, budget_s=100.0, max_rounds=0)
    assert device.asked == [] and settled.out_of_rounds == (case_name(ambiguous[0].case),)
