"""The stopping rule and the median statistic, driven by synthetic samplers and a fake clock."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binom

from kernelwatch.harness.timing import sampling
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.sampling import (
    BUDGET,
    CONVERGED,
    RESOLUTION,
    TIMEOUT,
    Sample,
    ci_rank,
    collect,
    median_ci,
    quantum,
    rel_ci_halfwidth,
    summarize,
    summarize_collected,
    warm_up,
)

#: The GPU's stopping rule as the product resolves it; each test changes what it exercises.
GPU_RULE = BenchOptions().resolved("cuda").rule


class FakeClock:
    """Wall time that advances only when a synthetic sample is taken."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def sampler(clock: FakeClock, times_ns, throttled=lambda i: False):
    """A sampler returning ``times_ns`` in turn; each sample advances the clock by its time."""
    counter = itertools.count()
    values = itertools.cycle(times_ns)

    def sample() -> Sample:
        i = next(counter)
        ns = next(values)
        clock.now += ns * 1e-9
        bad = throttled(i)
        return Sample(ns, 1980.0, 3200.0, 0x4 if bad else 0, bad)

    return sample


def test_ci_rank_matches_the_textbook_and_has_coverage():
    # n=10: the 95% CI of the median is [x(2), x(9)] (1-based), coverage 97.9%.
    assert ci_rank(10, 0.95) == 1
    assert ci_rank(5, 0.95) == -1  # no pair of order statistics reaches 95%
    for n in (6, 10, 37, 100, 1001):
        lower = ci_rank(n, 0.95)
        coverage = 1 - 2 * binom.cdf(lower, n, 0.5)
        assert coverage >= 0.95
        # and one rank tighter would fall short: the interval is the narrowest
        assert 1 - 2 * binom.cdf(lower + 1, n, 0.5) < 0.95


def test_ci_rank_is_scipy_stats_binomials_for_every_count_and_confidence():
    """The rank comes from ``scipy.special.bdtr`` (the binomial CDF) since importing
    ``scipy.stats`` costs every timing child and ``kernelwatch`` command about 1.7 s of CPU:
    the same rank as the definition over ``scipy.stats.binom`` for each count to 3,000 (to
    500 at 99% and 90%), and for counts a long budget reaches."""

    def by_stats(n: int, confidence: float) -> int:
        half_alpha = (1.0 - confidence) / 2.0
        k = int(binom.ppf(half_alpha, n, 0.5))
        return k - 1 if binom.cdf(k, n, 0.5) > half_alpha else k

    large = [10_007, 65_536, 250_001, 1_000_000]
    for confidence, top in ((0.95, 3000), (0.99, 500), (0.9, 500)):
        counts = [*range(1, top + 1), *large]
        assert [ci_rank(n, confidence) for n in counts] == [by_stats(n, confidence) for n in counts]


def test_a_process_that_times_or_runs_a_command_loads_no_scipy_stats():
    probe = (
        "import sys, kernelwatch.harness.timing.measurement, kernelwatch.cli.main; "
        "from kernelwatch.harness.timing.sampling import median_ci; "
        "median_ci([float(i) for i in range(50)]); "
        "print('scipy.stats' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_median_ci_brackets_the_median_and_full_range_below_six():
    values = [5.0, 1.0, 4.0, 2.0, 3.0, 9.0, 7.0, 8.0, 6.0, 10.0]
    assert median_ci(values) == (2.0, 9.0)
    assert median_ci([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_ci_coverage_holds_empirically_on_skewed_data():
    rng = np.random.default_rng(1)
    true_median = math.log(2)  # of Exp(1)
    hits = 0
    for _ in range(400):
        low, high = median_ci(list(rng.exponential(size=41)))
        hits += low <= true_median <= high
    assert hits / 400 >= 0.93


def test_converges_on_quiet_samples_after_minimums():
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.001, target_rel_ci=0.005, budget_s=10)
    quiet = [1_000_000.0 + d for d in (0, 1, -1, 2, -2)]
    result = collect([sampler(clock, quiet)], rule, clock, pause=lambda s: None)
    assert result.stop == CONVERGED
    assert len(result.arms[0]) == 10  # the minimum, and no more
    summary = summarize(result.arms[0], result.stop)
    assert summary.n == 10 and summary.rel_ci_halfwidth <= 0.005


def test_min_time_keeps_sampling_past_min_samples():
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.1, budget_s=10)
    result = collect([sampler(clock, [1_000_000.0])], rule, clock, pause=lambda s: None)
    assert result.stop == CONVERGED
    assert len(result.arms[0]) == 100  # 100 x 1 ms reaches 0.1 s


def test_noisy_samples_stop_at_the_budget_with_every_raw_sample_kept():
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, target_rel_ci=0.005, budget_s=0.05)
    noisy = [1e6, 2e6, 3e6, 1.5e6, 2.5e6]
    result = collect([sampler(clock, noisy)], rule, clock, pause=lambda s: None)
    assert result.stop == BUDGET
    assert len(result.arms[0]) == 25  # 0.05 s of 2 ms average samples
    assert [s.ns for s in result.arms[0][:5]] == noisy


def test_throttled_samples_are_kept_flagged_and_left_out():
    clock = FakeClock()
    pauses = []
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=10, throttle_pause_s=0.05)
    # every third sample throttled, and much slower
    times = [1e6, 1e6, 9e6]
    result = collect(
        [sampler(clock, times, throttled=lambda i: i % 3 == 2)], rule, clock, pauses.append
    )
    samples = result.arms[0]
    assert result.stop == CONVERGED
    assert sum(not s.throttled for s in samples) == 10
    assert len(pauses) == sum(s.throttled for s in samples) > 0
    summary = summarize(samples, result.stop)
    assert summary.n == 10 and summary.median_ns == 1e6 and summary.p90_ns == 1e6


def test_throttling_that_never_stops_ends_at_the_timeout():
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=0.01, timeout_s=0.05)
    result = collect(
        [sampler(clock, [1e6], throttled=lambda i: i % 10 != 0)], rule, clock, lambda s: None
    )
    assert result.stop == TIMEOUT
    summary = summarize(result.arms[0], result.stop)
    assert summary.n < 10 and summary.stop == TIMEOUT
    everything_throttled = [Sample(1.0, throttle_reasons=0x8, throttled=True)]
    assert summarize(everything_throttled, TIMEOUT) is None


def test_warm_up_runs_by_time():
    clock = FakeClock()
    calls = warm_up(sampler(clock, [1e6]), seconds=0.01, clock=clock)
    assert calls == 10
    assert warm_up(sampler(clock, [1e6]), seconds=0.0, clock=clock) == 1


def test_collect_refuses_no_arms():
    with pytest.raises(ValueError, match="at least one arm"):
        collect([], GPU_RULE)


def test_two_arms_alternate_and_both_sample_sets_come_back():
    order: list[str] = []
    clock = [0.0]

    def arm(name: str, ns: float):
        def sample() -> Sample:
            order.append(name)
            clock[0] += ns * 1e-9
            return Sample(ns)

        return sample

    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=10)
    result = collect([arm("A", 1e6), arm("B", 1.2e6)], rule, lambda: clock[0], lambda s: None)
    assert order == ["A", "B"] * 10  # A B A B ...: drift hits both alike
    a, b = result.arms
    assert len(a) == len(b) == 10 and result.stop == CONVERGED
    assert {s.ns for s in b} == {1.2e6}


def test_a_noisy_arm_keeps_both_arms_sampling_to_the_budget():
    clock = [0.0]
    noise = iter([1.0, 1.3, 0.8, 1.1] * 100)

    def quiet() -> Sample:
        clock[0] += 1e-3
        return Sample(1e6)

    def noisy() -> Sample:
        clock[0] += 1e-3
        return Sample(1e6 * next(noise))

    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=0.1)
    result = collect([quiet, noisy], rule, lambda: clock[0], lambda s: None)
    a, b = result.arms
    assert result.stop == BUDGET and len(a) == len(b) == 50  # 0.1 s of 2 ms rounds


def test_quantised_samples_are_never_reported_converged():
    """A ~1 us kernel timed with 0.5 us events: nine readings of 1.0 us in ten, one of 1.5 us.
    The order statistics tie, so the plain CI has zero width; the reported one covers half a
    step either side and the stop says the resolution, not the noise, bounds it."""
    clock = FakeClock()
    times = [1000.0] * 9 + [1500.0]
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, target_rel_ci=0.005, budget_s=0.01)
    result = collect([sampler(clock, times)], rule, clock, lambda s: None, resolution_ns=500.0)
    assert result.stop == RESOLUTION
    assert len(result.arms[0]) == 10  # more samples would not narrow it: no budget wasted
    summary = summarize(result.arms[0], result.stop, resolution_ns=result.resolution_ns)
    assert summary.median_ns == 1000.0
    assert (summary.ci_low_ns, summary.ci_high_ns) == (750.0, 1250.0)
    assert summary.rel_ci_halfwidth == pytest.approx(0.25)


def test_all_equal_samples_take_the_timer_resolution_as_their_step():
    values = [2000.0] * 20
    assert quantum(values, 500.0) == 500.0
    assert quantum(values) == 0.0  # a resolution nobody stated is not invented
    summary = summarize([Sample(v) for v in values], RESOLUTION, resolution_ns=500.0)
    assert (summary.ci_low_ns, summary.ci_high_ns) == (1750.0, 2250.0)
    # continuous-looking samples are left alone
    assert quantum([1000.0 + i for i in range(10)], 500.0) == 0.0


def test_the_ci_is_checked_every_round_to_twenty_then_a_tenth_later_each_time(monkeypatch):
    # The CI needs a sort: checking it on a geometric schedule keeps a long run O(n log n),
    # and checking every round up to twenty stops a quiet kernel at its first chance.
    checked: list[int] = []

    def never_settled(arms, *_):
        checked.append(len(arms[0]))

    monkeypatch.setattr(sampling, "_settled", never_settled)
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=0.2)
    result = collect([sampler(clock, [1e6])], rule, clock, lambda s: None)
    expected, due = [], 10
    while due < 200:
        expected.append(due)
        due += max(1, due // 10)
    assert expected[:12] == [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22]
    assert checked == [*expected, 200]  # and once more when the budget runs out
    assert result.stop == BUDGET


def test_the_budget_counts_from_the_first_sample_not_the_clocks_epoch():
    clock = FakeClock(now=5_000.0)  # a monotonic clock reads seconds since boot
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=1.0)
    result = collect([sampler(clock, [1e6])], rule, clock, lambda s: None)
    assert (result.stop, len(result.arms[0])) == (CONVERGED, 10)
    assert result.elapsed_s == pytest.approx(0.01)


def test_the_budget_is_spent_when_the_elapsed_time_reaches_it():
    # A clock that advances a whole second per sample meets the budget exactly.
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=12.0)
    noisy = [1e9, 2e9, 0.5e9]
    ticks = itertools.cycle(noisy)

    def whole_seconds() -> Sample:
        clock.now += 1.0
        return Sample(next(ticks))

    result = collect([whole_seconds], rule, clock, lambda s: None)
    assert (result.stop, len(result.arms[0])) == (BUDGET, 12)


def test_no_pause_after_a_throttled_sample_when_the_pause_is_zero():
    clock, pauses = FakeClock(), []
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, throttle_pause_s=0.0)
    collect([sampler(clock, [1e6], throttled=lambda i: i % 2 == 0)], rule, clock, pauses.append)
    assert pauses == []


def test_equal_samples_with_no_stated_resolution_converge():
    # Nothing says the timer is quantised: twenty equal 50 ns readings are a settled median.
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=20, min_time_s=0.0)
    result = collect([sampler(clock, [50.0])], rule, clock, lambda s: None)
    assert (result.stop, result.resolution_ns) == (CONVERGED, 0.0)
    blocks = sampling.collect_blocks([block_arm(clock, 1e-3, [], ns=50.0)], rule, clock)
    assert (blocks.stop, blocks.resolution_ns) == (CONVERGED, 0.0)
    # Nor is the summary's CI widened for a step nobody stated.
    summary = summarize(result.arms[0], result.stop)
    assert summary.ci_low_ns == summary.ci_high_ns == 50.0


def test_a_quantised_ci_is_widened_by_half_a_step_each_side():
    values = [1000.0] * 10 + [1100.0] * 10
    low, high = median_ci(values)
    assert (low, high) == (1000.0, 1100.0)
    # (1150 - 950) / 2 around the median 1050
    assert rel_ci_halfwidth(values) == pytest.approx(100.0 / 1050.0)


def test_equal_samples_have_no_width_unless_a_resolution_is_stated():
    assert rel_ci_halfwidth([2000.0] * 20) == 0.0
    assert rel_ci_halfwidth([2000.0] * 20, resolution_ns=500.0) == 0.125


def test_a_relative_width_needs_a_positive_median_however_small():
    assert rel_ci_halfwidth([0.5] * 3 + [0.6] * 7) == pytest.approx(0.1 / 0.6)
    assert rel_ci_halfwidth([0.0] * 10) == math.inf


def test_summary_statistics_are_the_usual_ones_over_the_counted_samples():
    values = [float(v) for v in range(1, 101)]
    summary = summarize([Sample(v) for v in values], CONVERGED)
    assert (summary.n, summary.median_ns, summary.mean_ns, summary.min_ns) == (100, 50.5, 50.5, 1.0)
    assert (summary.p10_ns, summary.p90_ns) == (
        np.percentile(values, 10),
        np.percentile(values, 90),
    )
    assert (summary.ci_low_ns, summary.ci_high_ns) == median_ci(values)


def test_a_collection_is_summarised_on_its_first_arm_unless_told():
    first = tuple(Sample(1000.0 + i) for i in range(10))
    second = tuple(Sample(2000.0 + i) for i in range(10))
    collected = sampling.Collected((first, second), CONVERGED, 0.1)
    assert summarize_collected(collected).median_ns == 1004.5
    assert summarize_collected(collected, arm=1).median_ns == 2004.5
    # At the 95% the summaries of records are made at.
    assert summarize_collected(collected) == summarize(first, CONVERGED, 0.95)
    with pytest.raises(AttributeError):
        collected.stop = BUDGET  # type: ignore[misc]


def block_arm(clock: FakeClock, per_sample_s: float, sizes: list[int], ns: float = 1e6):
    """A side's process taking blocks of samples: ``per_sample_s`` of wall time each sample
    (the round trip included), each block's size kept in ``sizes``."""

    def arm(n: int) -> list[Sample]:
        sizes.append(n)
        clock.now += per_sample_s * n
        return [Sample(ns) for _ in range(n)]

    return arm


def test_blocks_start_at_one_sample_then_last_about_the_block_time_of_the_slowest_arm():
    clock = FakeClock(now=100.0)
    fast, slow = [], []
    rule = replace(GPU_RULE, min_samples=60, min_time_s=0.0, budget_s=100.0, timeout_s=200.0)
    # Times exact in binary, so the block is exactly 1 s / 0.25 s per sample.
    arms = [block_arm(clock, 0.125, fast), block_arm(clock, 0.25, slow)]
    result = sampling.collect_blocks(arms, rule, clock, block_s=1.0)
    # First a sample an arm; then the block time over the slower arm's time, for both.
    assert fast[:3] == slow[:3] == [1, 4, 4]
    assert fast == slow and len(result.arms[0]) == len(result.arms[1]) == sum(fast)
    assert result.stop == CONVERGED and sum(fast) >= 60


def test_blocks_of_instant_or_tiny_samples_are_capped():
    clock = FakeClock()
    sizes: list[int] = []
    rule = replace(GPU_RULE, min_samples=200, min_time_s=0.0, budget_s=10.0, timeout_s=20.0)
    sampling.collect_blocks([block_arm(clock, 0.0, sizes)], rule, clock)
    assert sizes[:3] == [1, sampling.MAX_BLOCK, sampling.MAX_BLOCK]  # no time: the cap
    tiny: list[int] = []
    sampling.collect_blocks([block_arm(clock, 1e-6, tiny)], rule, clock, block_s=0.02)
    assert tiny[:2] == [1, sampling.MAX_BLOCK]  # 20,000 would fit: the cap again
    slow: list[int] = []
    sampling.collect_blocks([block_arm(clock, 0.05, slow)], rule, clock, block_s=0.02)
    assert slow[:3] == [1, 1, 1]  # a sample longer than the block: one at a time
    assert len(slow) == 200  # and it still samples to the rule's minimum


def test_a_block_stops_as_soon_as_the_rule_does_and_a_short_block_is_refused():
    clock = FakeClock()
    sizes: list[int] = []
    rule = replace(GPU_RULE, min_samples=1, min_time_s=0.0, budget_s=1.0, timeout_s=2.0)
    result = sampling.collect_blocks([block_arm(clock, 0.001, sizes)], rule, clock)
    assert (sizes, result.stop) == ([1], CONVERGED)  # one equal sample: settled at once
    with pytest.raises(ValueError, match="an arm returned 0 samples for a block of 1"):
        sampling.collect_blocks([lambda n: []], rule, clock)
    with pytest.raises(ValueError, match="collect_blocks needs at least one arm"):
        sampling.collect_blocks([], rule, clock)


def test_the_timeout_is_reached_when_the_elapsed_time_equals_it():
    # Throttled samples never count, so only the timeout ends this: at exactly 3 s.
    clock = FakeClock()
    rule = replace(GPU_RULE, min_samples=10, min_time_s=0.0, budget_s=1.0, timeout_s=3.0,
                   throttle_pause_s=0.0)  # fmt: skip

    def throttled_second() -> Sample:
        clock.now += 1.0
        return Sample(1e6, throttled=True)

    result = collect([throttled_second], rule, clock, lambda s: None)
    assert (result.stop, len(result.arms[0])) == (TIMEOUT, 3)


def test_a_quantised_ci_exactly_at_the_target_but_for_its_step_is_resolution_bound():
    values = [1000.0] * 10 + [1010.0] * 10
    unwidened = sampling._ci_halfwidth(values, 0.95, 0.0)
    assert sampling._settled([values], unwidened, 0.95, 0.0) == sampling.RESOLUTION
    assert sampling._settled([values], unwidened * 0.99, 0.95, 0.0) is None


def test_a_block_holds_as_many_samples_as_fit_its_time():
    # 1 s of 0.1 s samples is ten, though 1.0 // 0.1 is 9.0 in floating point.
    clock = FakeClock()
    sizes: list[int] = []
    rule = replace(GPU_RULE, min_samples=30, min_time_s=0.0, budget_s=100.0, timeout_s=200.0)
    sampling.collect_blocks([block_arm(clock, 0.1, sizes)], rule, clock, block_s=1.0)
    assert sizes[:2] == [1, 10]
