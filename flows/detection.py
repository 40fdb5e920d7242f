"""Detection over stored history: find change points in every series of a repository, open
one regression per culprit range, and close the regressions whose series recovered.

``plan`` is pure (stored history in, actions out); ``detect_and_alert`` reads the store,
plans, and writes the actions in one transaction, so a pass is all or nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from kernelwatch.analysis.aa_rate import AARate, aa_pair, aa_rates
from kernelwatch.analysis.changepoints import ChangePoint
from kernelwatch.analysis.grouping import Alert, Regression, group, place
from kernelwatch.analysis.record_changes import detect_measurements
from kernelwatch.analysis.shift_test import counted_samples
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.triage_rules import Triage, auto_close, recovery_index
from kernelwatch.store.aa_pairs import AAPairRow, insert_aa_pairs, insert_aa_rates, judged_pairs
from kernelwatch.store.findings import (
    NewChangePoint,
    NewRegression,
    OpenMember,
    StoredDrift,
    insert_change_points,
    open_members,
    open_regression,
    stored_change_points,
    update_drifts,
)
from kernelwatch.store.series_history import StoredRun, StoredSeries, load_histories, repository_id
from kernelwatch.store.triage_state import write_move

DETECTOR = "kw-edm-1"
ACTOR = "kernelwatch"
#: A change found within this many points of a stored one is the same change, located again
#: with more data after it: it is not a new alert.
SAME_CHANGE_POINTS = 3


@dataclass(frozen=True)
class Found:
    """A new change point of one series, with what grouping and the alert title need."""

    series: StoredSeries
    point: NewChangePoint
    change: ChangePoint
    cause: str


@dataclass(frozen=True)
class Draft:
    """A regression to open over ``members`` (indices into ``Plan.found``)."""

    title: str
    cause: str
    magnitude: float
    good_commit_id: int | None
    bad_commit_id: int | None
    members: tuple[int, ...]


@dataclass(frozen=True)
class Plan:
    """What one detection pass will write."""

    found: tuple[Found, ...]
    alerts: tuple[Draft, ...]
    closes: tuple[tuple[int, Triage], ...]
    too_short: int
    #: Stored drifts as judged again now (stored measurement id, the change): one that was
    #: open is closed at the night it stopped.
    drifts: tuple[tuple[int, NewChangePoint], ...] = ()


@dataclass(frozen=True)
class PassReport:
    """What one detection pass did, and the A/B rule's false-alarm rate it measured on the
    history's A/A pairs (``analysis/aa_rate.py``; per pool and GPU model)."""

    series: int
    too_short: int
    change_points: int
    opened: tuple[int, ...]
    closed: tuple[int, ...]
    aa: tuple[AARate, ...] = ()


def plan(
    histories: Sequence[StoredSeries],
    stored: dict[int, set[int]],
    members: Sequence[OpenMember],
    thresholds: Thresholds,
) -> Plan:
    """Decide a pass from stored history: new change points (not within
    ``SAME_CHANGE_POINTS`` of a stored one; each series judged by its kernel's detection
    thresholds), their grouping into alerts (regressions only; improvements are kept as
    change points), and the open regressions whose every series recovered."""
    order = _commit_order(histories)
    found: list[Found] = []
    drifts: list[tuple[int, NewChangePoint]] = []
    detections: dict[int, tuple[StoredSeries, tuple[ChangePoint, ...]]] = {}
    too_short = 0
    for series in histories:
        detection = detect_measurements(series.runs, thresholds.for_kernel(series.kernel).detection)
        if detection.status == "too_short":
            too_short += 1
            continue
        detections[series.series_id] = (series, detection.change_points)
        seen = stored.get(series.series_id, set())
        known = [i for i, run in enumerate(series.runs) if run.measurement_id in seen]
        for change in detection.change_points:
            near = [k for k in known if abs(change.index - k) <= SAME_CHANGE_POINTS]
            if not near:
                found.append(_found(series, change))
            elif change.drift is not None:
                nearest = min(near, key=lambda k: abs(change.index - k))
                stored_at = series.runs[nearest].measurement_id
                drifts.append((stored_at, _found(series, change).point))
    alerts = _alerts(found, order)
    return Plan(tuple(found), alerts, _recovered(members, detections), too_short, tuple(drifts))


def detect_and_alert(
    conn: psycopg.Connection, repository: str, thresholds: Thresholds
) -> PassReport:
    """Run one detection pass over a repository's stored history and write its outcome,
    with the configured ``thresholds`` (``kernelwatch.toml``)."""
    repo_id = repository_id(conn, repository)
    if repo_id is None:
        return PassReport(0, 0, 0, (), ())
    with conn.transaction(), conn.cursor() as cur:
        histories = load_histories(conn, repo_id)
        stored = stored_change_points(cur, repo_id)
        decided = plan(histories, stored, open_members(cur, repo_id), thresholds)
        ids = insert_change_points(cur, DETECTOR, [f.point for f in decided.found])
        update_drifts(cur, decided.drifts)
        opened = [
            open_regression(cur, repo_id, _regression(draft, ids), ACTOR)
            for draft in decided.alerts
        ]
        for regression_id, after in decided.closes:
            write_move(cur, regression_id, after, ACTOR, after.notes[-1])
        rates = _false_alarms(cur, repo_id, histories, thresholds)
    return PassReport(
        series=len(histories),
        too_short=decided.too_short,
        change_points=len(decided.found),
        opened=tuple(opened),
        closed=tuple(r for r, _ in decided.closes),
        aa=tuple(rates),
    )


def aa_pairs(histories: Sequence[StoredSeries], thresholds: Thresholds) -> list[AAPairRow]:
    """The newest A/A pair of each series, judged by its kernel's A/B rule."""
    rows = []
    for series in histories:
        verdict = aa_pair(series.runs, thresholds.for_kernel(series.kernel).verdict)
        if verdict is None:
            continue
        before, after = series.runs[-2], series.runs[-1]
        rows.append(
            AAPairRow(after.measurement_id, before.measurement_id, series.series_id,
                      after.pool or "", series.device_model, verdict.verdict, verdict.ratio,
                      verdict.p_value, after.measured_at)
        )  # fmt: skip
    return rows


def _false_alarms(
    cur: psycopg.Cursor, repo_id: int, histories: Sequence[StoredSeries], thresholds: Thresholds
) -> list[AARate]:
    """Judge tonight's A/A pairs, store them, and the rates over the window they close."""
    pairs = aa_pairs(histories, thresholds)
    insert_aa_pairs(cur, pairs)
    if not pairs:
        return []
    until = max(p.measured_at for p in pairs)
    rates = aa_rates(judged_pairs(cur, repo_id, until), thresholds.verdict.alpha)
    insert_aa_rates(cur, repo_id, until, rates)
    return rates


def _found(series: StoredSeries, change: ChangePoint) -> Found:
    runs = series.runs
    after, before = runs[change.index], runs[change.index - 1]
    before_ns = _level(runs[max(0, change.index - 6) : change.index])
    # A drift's new level is where its ramp ended, not the points right after it began.
    settled = change.index if change.drift is None else change.drift.end
    after_ns = _level(runs[settled : settled + 6])
    # The kernel artifact's identity: if the autotuner picked another config at the change,
    # that flip, not the code, is the first suspect.
    cause = "autotune" if before.config != after.config else change.cause
    point = NewChangePoint(
        series_id=series.series_id,
        measurement_id=after.measurement_id,
        commit_id=after.commit_id,
        at=after.measured_at,
        before_ns=before_ns,
        after_ns=after_ns,
        rel_change=change.magnitude_pct / 100.0,
        p_value=change.p_value,
        direction=change.direction,
        drift=None
        if change.drift is None
        else StoredDrift(
            change.drift.slope_pct / 100.0,
            runs[change.drift.end].measurement_id,
            change.drift.ongoing,
        ),
    )
    return Found(series, point, change, cause)


def _level(runs: Sequence[StoredRun]) -> float:
    counted = [counted_samples(r)[0] for r in runs if r.status == "ok"]
    values = [float(np.median(c)) for c in counted if c.size]
    return float(np.median(values)) if values else float("nan")


def _commit_order(histories: Sequence[StoredSeries]) -> dict[int | None, int]:
    """Position of each commit on the branch, by when it was first measured: nightly
    history is measured in commit order."""
    first: dict[int | None, tuple] = {}
    for series in histories:
        for run in series.runs:
            key = (run.measured_at, run.measurement_id)
            if run.commit_id not in first or key < first[run.commit_id]:
                first[run.commit_id] = key
    return {commit: i for i, commit in enumerate(sorted(first, key=first.__getitem__))}


def _alerts(found: Sequence[Found], order: dict[int | None, int]) -> tuple[Draft, ...]:
    commit_at = {position: commit for commit, position in order.items()}
    placed: list[Regression] = []
    for i, f in enumerate(found):
        if f.change.direction == "regression":
            positions = [order[run.commit_id] for run in f.series.runs]
            placed.append(place(str(i), f.change, positions))
    return tuple(_draft(alert, found, commit_at) for alert in group(placed))


def _draft(alert: Alert, found: Sequence[Found], commit_at: dict[int, int | None]) -> Draft:
    members = tuple(sorted(int(key) for key in alert.series))
    chosen = [found[i] for i in members]
    worst = max(chosen, key=lambda f: abs(f.change.magnitude_pct))
    kernels = sorted({f.series.kernel for f in chosen})
    drift = worst.change.drift
    moved = (
        f"{worst.change.magnitude_pct:+.1f}%"
        if drift is None
        else f"drifting {drift.slope_pct:+.2f}%/night, {drift.total_pct:+.1f}% in all"
        + (" and still drifting" if drift.ongoing else "")
    )
    title = f"{', '.join(kernels)}: {moved} ({len(chosen)} series; worst {worst.series.label()})"
    return Draft(
        title=title,
        cause=Counter(f.cause for f in chosen).most_common(1)[0][0],
        magnitude=worst.change.magnitude_pct / 100.0,
        good_commit_id=commit_at.get(alert.after),
        bad_commit_id=commit_at.get(alert.until),
        members=members,
    )


def _regression(draft: Draft, ids: Sequence[int]) -> NewRegression:
    return NewRegression(
        title=draft.title,
        cause=draft.cause,
        magnitude=draft.magnitude,
        good_commit_id=draft.good_commit_id,
        bad_commit_id=draft.bad_commit_id,
        change_point_ids=tuple(ids[i] for i in draft.members),
    )


def _recovered(
    members: Sequence[OpenMember],
    detections: dict[int, tuple[StoredSeries, tuple[ChangePoint, ...]]],
) -> tuple[tuple[int, Triage], ...]:
    """Open regressions every series of which came back to its level before the change."""
    by_regression: dict[int, list[OpenMember]] = {}
    for m in members:
        by_regression.setdefault(m.regression_id, []).append(m)
    closes = []
    for regression_id, group_members in by_regression.items():
        points = [_recovery_point(m, detections) for m in group_members]
        if all(p is not None for p in points):
            at = max(p for p in points if p is not None)
            closes.append((regression_id, auto_close(group_members[0].triage, at)))
    return tuple(closes)


def _recovery_point(
    member: OpenMember, detections: dict[int, tuple[StoredSeries, tuple[ChangePoint, ...]]]
) -> int | None:
    if member.series_id not in detections:
        return None
    series, changes = detections[member.series_id]
    ids = [run.measurement_id for run in series.runs]
    if member.measurement_id not in ids:
        return None  # the change is older than the window: its recovery was judged before
    index = ids.index(member.measurement_id)
    y = [_level([run]) for run in series.runs]
    change = ChangePoint(index, "regression", 100.0 * member.rel_change, 0.0, 1.0, "unknown")
    return recovery_index(y, change, changes)
