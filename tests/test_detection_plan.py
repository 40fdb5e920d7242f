"""What a detection pass decides from stored history (flows/detection.py's pure part): the
change point it records, with the levels either side and its size, and the regression it
drafts; a change it has stored already is not found again."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from kernelwatch.analysis.thresholds import DetectorConfig, Thresholds
from kernelwatch.analysis.triage_rules import Triage
from kernelwatch.flows.detection import SAME_CHANGE_POINTS, plan
from kernelwatch.store.findings import OpenMember
from kernelwatch.store.series_history import StoredRun, StoredSeries

START = datetime(2026, 1, 1, tzinfo=UTC)
STEP_AT = 40


def _series(
    n: int = 60,
    series_id: int = 1,
    flip_at: int = STEP_AT,
    back_at: int | None = None,
    step_at: int = STEP_AT,
    second_at: int | None = None,
) -> StoredSeries:
    """A nightly series of commits 1000, 1001, ... with a 10 % slowdown at ``step_at`` (and
    another from ``second_at``) and the config flipped at ``flip_at``; from ``back_at`` on,
    a revert that lands 3 % above the old level. Each night's samples are noisy, so each
    window of nights has a median of its own."""
    rng = np.random.default_rng(series_id)

    def level(i: int) -> float:
        if back_at is not None and i >= back_at:
            return 1.03
        second = 1.1 if second_at is not None and i >= second_at else 1.0
        return second * (1.1 if i >= step_at else 1.0)

    runs = tuple(
        StoredRun(
            measurement_id=100 + i,
            run_pk=i,
            commit_id=1000 + i,
            commit_sha=f"{i:040x}",
            measured_at=START + timedelta(days=i),
            config="BLOCK=64" if i < flip_at else "BLOCK=128",
            status="ok",
            samples_ns=tuple(1e5 * level(i) * np.exp(rng.normal(0, 0.01, 30))),
            throttled=(),
            sm_clock_mhz=(),
        )
        for i in range(n)
    )
    return StoredSeries(series_id, f"s{series_id}", "gemm", {"m": 4096}, "fp16", "H100", runs)


def _level(runs: tuple[StoredRun, ...]) -> float:
    return float(np.median([np.median(r.samples_ns) for r in runs]))


@pytest.mark.parametrize("step_at", [STEP_AT, STEP_AT + 2])
def test_a_new_change_is_recorded_with_the_levels_of_the_six_nights_either_side(step_at):
    series = _series(step_at=step_at, flip_at=step_at)
    decided = plan([series], {}, [], Thresholds())
    [found] = decided.found
    point, change = found.point, found.change
    assert change.index == step_at
    assert (point.measurement_id, point.commit_id) == (100 + step_at, 1000 + step_at)
    assert point.before_ns == _level(series.runs[step_at - 6 : step_at])
    assert point.after_ns == _level(series.runs[step_at : step_at + 6])
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


@pytest.mark.parametrize(("stored_at", "new"), [(STEP_AT - 3, False), (STEP_AT - 4, True)])
def test_a_change_within_three_points_of_a_stored_one_is_the_same_change(stored_at, new):
    assert SAME_CHANGE_POINTS == 3  # as docs/DETECTION.md says
    series = _series()
    stored = {series.series_id: {series.runs[stored_at].measurement_id}}
    assert len(plan([series], stored, [], Thresholds()).found) == (1 if new else 0)


def test_a_change_in_the_first_six_nights_takes_its_level_from_every_night_before_it():
    # A repository may let a regime be as short as three nights.
    short = Thresholds(detection=DetectorConfig(min_size=3, tail_points=0, alpha=1e-3))
    series = _series(n=30, step_at=5, flip_at=5)
    [found] = plan([series], {}, [], short).found
    assert found.change.index == 5
    assert found.point.before_ns == _level(series.runs[:5])


def test_a_new_change_after_a_stored_one_in_the_same_series_is_found():
    # The slowdown at 40 is stored; a second one at 70 is new.
    series = _series(n=100, second_at=70)
    stored = {series.series_id: {series.runs[STEP_AT].measurement_id}}
    decided = plan([series], stored, [], Thresholds())
    assert [f.change.index for f in decided.found] == [70]


def test_an_improvement_is_recorded_but_drafts_no_regression():
    faster = _series()
    runs = tuple(
        dataclasses.replace(r, samples_ns=tuple(v / 1.21 for v in r.samples_ns))
        if i >= STEP_AT
        else r
        for i, r in enumerate(faster.runs)
    )
    decided = plan([dataclasses.replace(faster, runs=runs)], {}, [], Thresholds())
    assert [f.change.direction for f in decided.found] == ["improvement"]
    assert decided.alerts == ()


def test_a_failed_run_is_not_part_of_the_level_around_a_change():
    series = _series()
    runs = list(series.runs)
    failed = runs[STEP_AT - 2]
    runs[STEP_AT - 2] = dataclasses.replace(
        failed, status="error", samples_ns=tuple(10 * v for v in failed.samples_ns)
    )
    [found] = plan([dataclasses.replace(series, runs=tuple(runs))], {}, [], Thresholds()).found
    ok = [r for r in runs[STEP_AT - 6 : STEP_AT] if r.status == "ok"]
    assert found.point.before_ns == _level(tuple(ok))


def test_a_series_too_short_to_judge_is_counted_not_searched():
    decided = plan([_series(n=5)], {}, [], Thresholds())
    assert (decided.too_short, decided.found, decided.alerts) == (1, (), ())


def test_a_config_flip_at_the_change_is_blamed_whichever_way_it_goes():
    series = _series()
    flipped = tuple(
        dataclasses.replace(r, config="BLOCK=64" if r.config == "BLOCK=128" else "BLOCK=128")
        for r in series.runs
    )
    [found] = plan([dataclasses.replace(series, runs=flipped)], {}, [], Thresholds()).found
    assert found.cause == "autotune"


def test_a_config_flip_the_night_before_the_change_is_not_blamed():
    # The autotuner picked another config a night before the slowdown: the night of the
    # change ran the same config as the night before it, so the code is the suspect.
    [found] = plan([_series(flip_at=STEP_AT - 1)], {}, [], Thresholds()).found
    assert found.change.index == STEP_AT
    assert found.cause != "autotune"


def test_a_commit_measured_again_later_keeps_the_position_of_its_first_measurement():
    # Two series slow down a night apart, so the alert's range is the median of their
    # ranges' ends, in commit order. A third series measures one of those commits again
    # weeks later (a re-run): the commit's place in that order is still where nightly
    # history first met it, so the range is the same as without the re-run.
    first, second = _series(series_id=1), _series(series_id=2, step_at=STEP_AT + 1)
    old = first.runs[STEP_AT + 2]
    rerun = dataclasses.replace(
        old, measurement_id=900, run_pk=900, measured_at=START + timedelta(days=100)
    )
    other = StoredSeries(3, "s3", "norm", {"n": 8}, "fp16", "H100", (rerun,))
    [draft] = plan([first, second, other], {}, [], Thresholds()).alerts
    assert draft.members == (0, 1)
    assert (draft.good_commit_id, draft.bad_commit_id) == (1000 + STEP_AT - 3, 1000 + STEP_AT + 3)


def _open_member(series: StoredSeries, rel_change: float = 0.1) -> OpenMember:
    return OpenMember(
        regression_id=7,
        triage=Triage(),
        series_id=series.series_id,
        measurement_id=series.runs[STEP_AT].measurement_id,
        rel_change=rel_change,
    )


def test_a_revert_close_to_the_old_level_closes_the_open_regression():
    # Back to 3 % above the old level after a 10 % slowdown: within half the change's size
    # (analysis/triage_rules.recovery_index), so the regression closes as fixed.
    series = _series(back_at=50)
    [(regression_id, after)] = plan([series], {}, [_open_member(series)], Thresholds()).closes
    assert (regression_id, after.state) == (7, "fixed")


@pytest.mark.parametrize(("back_to", "closes"), [(1.0485, True), (1.0490, False)])
def test_a_revert_closes_only_within_half_the_change_in_log_space(back_to, closes):
    # Noise-free nights: 10 % slower at 40, back to ``back_to`` for the last six nights.
    # Half of log(1.1) is 0.047655: log(1.0485) = 0.047361 is within it, log(1.0490) is not.
    def level(i: int) -> float:
        return back_to if i >= 54 else (1.1 if i >= STEP_AT else 1.0)

    series = _series()
    exact = tuple(
        dataclasses.replace(r, samples_ns=(1e5 * level(i),) * 30) for i, r in enumerate(series.runs)
    )
    series = dataclasses.replace(series, runs=exact)
    closed = plan([series], {}, [_open_member(series)], Thresholds()).closes
    assert [r for r, _ in closed] == ([7] if closes else [])


def test_a_regression_whose_series_stayed_slow_stays_open():
    series = _series()
    assert plan([series], {}, [_open_member(series)], Thresholds()).closes == ()


def test_a_plan_and_what_it_holds_are_immutable():
    decided = plan([_series()], {}, [], Thresholds())
    [found], [draft] = decided.found, decided.alerts
    for record, field in ((decided, "too_short"), (found, "cause"), (draft, "title")):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, None)
