"""What a detection pass decides from stored history (flows/detection.py's pure part): the
change point it records, with the levels either side and its size, and the regression it
drafts; a change it has stored already is not found again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.flows.detection import SAME_CHANGE_POINTS, plan
from kernelwatch.store.series_history import StoredRun, StoredSeries

START = datetime(2026, 1, 1, tzinfo=UTC)
STEP_AT = 40


def _series(n: int = 60, series_id: int = 1) -> StoredSeries:
    """A nightly series with a 10 % slowdown at point 40; the config flips there too. Each
    night's samples are noisy, so each window of nights has a median of its own."""
    rng = np.random.default_rng(series_id)
    runs = tuple(
        StoredRun(
            measurement_id=100 + i,
            run_pk=i,
            commit_id=1000 + i,
            commit_sha=f"{i:040x}",
            measured_at=START + timedelta(days=i),
            config="BLOCK=64" if i < STEP_AT else "BLOCK=128",
            status="ok",
            samples_ns=tuple(
                1e5 * (1.1 if i >= STEP_AT else 1.0) * np.exp(rng.normal(0, 0.01, 30))
            ),
            throttled=(),
            sm_clock_mhz=(),
        )
        for i in range(n)
    )
    return StoredSeries(series_id, f"s{series_id}", "gemm", {"m": 4096}, "fp16", "H100", runs)


def _level(runs: tuple[StoredRun, ...]) -> float:
    return float(np.median([np.median(r.samples_ns) for r in runs]))


def test_a_new_change_is_recorded_with_the_levels_of_the_six_nights_either_side():
    series = _series()
    decided = plan([series], {}, [], Thresholds())
    [found] = decided.found
    point, change = found.point, found.change
    assert change.index == STEP_AT
    assert (point.measurement_id, point.commit_id) == (100 + STEP_AT, 1000 + STEP_AT)
    assert point.before_ns == _level(series.runs[STEP_AT - 6 : STEP_AT])
    assert point.after_ns == _level(series.runs[STEP_AT : STEP_AT + 6])
    assert point.rel_change == change.magnitude_pct / 100.0
    assert found.cause == "autotune"  # the config flipped at the change: the first suspect


def test_the_drafted_regression_names_the_range_and_the_worst_change():
    decided = plan([_series()], {}, [], Thresholds())
    [draft] = decided.alerts
    [found] = decided.found
    assert draft.magnitude == found.change.magnitude_pct / 100.0
    # Two points of slack either side of the change (analysis/grouping.place).
    assert (draft.good_commit_id, draft.bad_commit_id) == (1000 + STEP_AT - 3, 1000 + STEP_AT + 2)
    assert draft.title == (
        f"gemm: {found.change.magnitude_pct:+.1f}% (1 series; worst gemm m=4096 fp16 H100)"
    )
    assert (draft.cause, draft.members) == ("autotune", (0,))


@pytest.mark.parametrize(
    ("stored_at", "new"), [(STEP_AT - SAME_CHANGE_POINTS, False), (STEP_AT - 4, True)]
)
def test_a_change_within_three_points_of_a_stored_one_is_the_same_change(stored_at, new):
    series = _series()
    stored = {series.series_id: {series.runs[stored_at].measurement_id}}
    assert len(plan([series], stored, [], Thresholds()).found) == (1 if new else 0)


def test_a_series_too_short_to_judge_is_counted_not_searched():
    decided = plan([_series(n=5)], {}, [], Thresholds())
    assert (decided.too_short, decided.found, decided.alerts) == (1, (), ())
