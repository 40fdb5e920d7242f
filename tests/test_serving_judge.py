"""Issue 43: serving results judged like kernels (serving/judge.py): change points per
deployment and metric with the metric's direction, and the A/B of two runs' per-request
samples at p50 and p99."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from kernelwatch.serving.judge import MAX_AB_SAMPLES, changes, compare_runs
from kernelwatch.serving.results import HistoryPoint

START = datetime(2026, 11, 1, 2, tzinfo=UTC)


def _history(levels: list[float], noise: float = 0.01, seed: int = 0) -> list[HistoryPoint]:
    rng = np.random.default_rng(seed)
    return [
        HistoryPoint(i + 1, START + timedelta(days=i), f"k{i:02d}", level * rng.lognormal(0, noise))
        for i, level in enumerate(levels)
    ]


def test_a_six_percent_p99_tpot_step_is_one_regression_at_its_first_run():
    history = _history([20.0] * 20 + [21.2] * 15)
    (change,) = changes(history, "p99_tpot_ms")
    assert change.direction == "regression" and not change.provisional
    assert (change.previous.kernel_commit, change.run.kernel_commit) == ("k19", "k20")
    assert change.magnitude_pct == pytest.approx(6.0, abs=1.5)


def test_a_flat_history_has_no_change():
    assert changes(_history([20.0] * 35), "p99_tpot_ms") == []


@pytest.mark.parametrize(("after", "direction"), [(0.92, "regression"), (1.08, "improvement")])
def test_throughput_falling_is_the_regression(after, direction):
    history = _history([5000.0] * 20 + [5000.0 * after] * 15)
    (change,) = changes(history, "output_throughput")
    assert change.direction == direction
    # The same step in a latency is the other way round.
    (latency,) = changes(history, "median_itl_ms")
    assert latency.direction != direction


def test_the_newest_runs_of_a_step_are_a_provisional_change():
    (change,) = changes(_history([20.0] * 14 + [21.2] * 3), "p99_tpot_ms")
    assert change.provisional and change.run.kernel_commit == "k14"


def test_a_run_that_measured_nothing_is_left_out_not_refused():
    history = _history([20.0] * 20 + [21.2] * 15)
    zero = HistoryPoint(99, START, "none", 0.0)
    (change,) = changes([*history[:5], zero, *history[5:]], "p99_tpot_ms")
    assert change.run.kernel_commit == "k20"


def test_an_unknown_metric_is_refused():
    with pytest.raises(ValueError, match="unknown serving metric"):
        changes(_history([1.0] * 20), "p99_goodness")


def _gaps(seed: int, n: int, median_ms: float, stalls: float = 0.005) -> np.ndarray:
    # Inter-token gaps: log-normal around the median, and a few decode steps that shared
    # their batch with a prefill (chunked prefill) 1.5-2.5 times as long.
    rng = np.random.default_rng(seed)
    gaps = median_ms * rng.lognormal(0.0, 0.15, n)
    stalled = rng.random(n) < stalls
    gaps[stalled] *= rng.uniform(1.5, 2.5, stalled.sum())
    return gaps


#: A run's gaps as judged: 100 requests of 200 tokens, subsampled to the cap.
N = MAX_AB_SAMPLES


def test_an_eight_percent_itl_shift_is_slower_at_p50_and_p99():
    a = {"itl": _gaps(1, N, 10.0), "ttft": _gaps(3, 200, 50.0, stalls=0)}
    b = {"itl": _gaps(2, N, 10.8), "ttft": _gaps(4, 200, 50.0, stalls=0)}
    verdicts = {(v.latency, v.statistic): v.verdict for v in compare_runs(a, b)}
    assert set(verdicts) == {("itl", "p50"), ("itl", "p99"), ("ttft", "p50"), ("ttft", "p99")}
    assert verdicts[("itl", "p50")].verdict == "SLOWER"
    assert verdicts[("itl", "p99")].verdict == "SLOWER"
    assert verdicts[("itl", "p99")].ratio == pytest.approx(1.08, abs=0.02)
    # 200 TTFTs of one distribution cannot pin a p99 to 3%: never a verdict either way.
    assert verdicts[("ttft", "p99")].verdict in ("SAME", "AMBIGUOUS")


@pytest.mark.parametrize("seed", [1, 3, 5])
def test_two_samples_of_one_distribution_are_never_told_apart(seed):
    # The p50 is SAME; a p99 of 20,000 gaps is known to about 1.5% a side, so against a 3%
    # margin it is SAME or, one draw in four or so, AMBIGUOUS, never SLOWER or FASTER.
    p50, p99 = compare_runs({"itl": _gaps(seed, N, 10.0)}, {"itl": _gaps(seed + 1, N, 10.0)})
    assert p50.verdict.verdict == "SAME"
    assert p99.verdict.verdict in ("SAME", "AMBIGUOUS")
    assert p99.verdict.ci_low < 1.0 < p99.verdict.ci_high


def test_runs_without_shared_samples_cannot_be_compared():
    with pytest.raises(ValueError, match="--save-detailed"):
        compare_runs({"itl": _gaps(1, 10, 10.0)}, {"ttft": _gaps(2, 10, 10.0)})


def test_a_huge_run_is_subsampled_and_zero_gaps_dropped():
    a = np.concatenate([_gaps(1, 2 * N, 10.0), np.zeros(50)])
    (p50, _) = compare_runs({"itl": a}, {"itl": _gaps(2, 100, 10.0)})
    assert (p50.verdict.n_a, p50.verdict.n_b) == (N, 100)
