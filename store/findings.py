"""Writing what detection found: change points per series, and one regression per group of
change points that one commit range explains (``kernelwatch.analysis.grouping``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from kernelwatch.analysis.triage_rules import Triage
from kernelwatch.store.triage_state import OPEN_SQL, add_event


@dataclass(frozen=True)
class NewChangePoint:
    """A confirmed change of one series, at the first measurement of the new regime.
    ``rel_change`` is after/before - 1 of the median level."""

    series_id: int
    measurement_id: int
    commit_id: int | None
    at: datetime
    before_ns: float
    after_ns: float
    rel_change: float
    p_value: float
    direction: str
    drift: StoredDrift | None = None


@dataclass(frozen=True)
class StoredDrift:
    """What makes a change point a drift: its relative change per night, the first
    measurement at the level it reached, and whether it was still drifting."""

    slope: float
    end_measurement_id: int
    open: bool


@dataclass(frozen=True)
class NewRegression:
    """An alert to open: its change points and the commit range the culprit lies in;
    ``kind`` (timing, correctness, static), what opened it (``change_point`` or the same
    night's ``confirmation``) and the note of its first triage event."""

    title: str
    cause: str
    magnitude: float | None
    good_commit_id: int | None
    bad_commit_id: int | None
    change_point_ids: tuple[int, ...]
    kind: str = "timing"
    opened_by: str = "change_point"
    note: str = ""


@dataclass(frozen=True)
class OpenMember:
    """One change point of an open regression, with the regression's triage state."""

    regression_id: int
    triage: Triage
    series_id: int
    measurement_id: int
    rel_change: float


def stored_change_points(cur: psycopg.Cursor, repository_id: int) -> dict[int, set[int]]:
    """Measurement ids of the change points already stored, per series, whichever detector
    stored them (a change the same night's A/B confirmed is the same change when the
    history net locates it later)."""
    found: dict[int, set[int]] = {}
    rows = cur.execute(
        """
        SELECT cp.series_id, cp.measurement_id FROM change_points cp
            JOIN series s ON s.id = cp.series_id JOIN kernels k ON k.id = s.kernel_id
        WHERE k.repository_id = %s""",
        (repository_id,),
    )
    for series_id, measurement_id in rows:
        found.setdefault(series_id, set()).add(measurement_id)
    return found


def insert_change_points(
    cur: psycopg.Cursor, detector: str, points: Sequence[NewChangePoint]
) -> list[int]:
    """Store change points (a point stored before is left as it is); their ids, in order."""
    ids = []
    for p in points:
        row = cur.execute(
            """
            INSERT INTO change_points (series_id, measurement_id, commit_id, at, detector,
                before_ns, after_ns, rel_change, score, direction, drift_slope,
                drift_end_measurement_id, drift_open)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
            ON CONFLICT (series_id, measurement_id, detector)
                DO UPDATE SET detected_at = change_points.detected_at
            RETURNING id""",
            (
                p.series_id,
                p.measurement_id,
                p.commit_id,
                p.at,
                detector,
                p.before_ns,
                p.after_ns,
                p.rel_change,
                p.p_value,
                p.direction,
                *_drift_values(p.drift),
            ),
        ).fetchone()
        ids.append(row[0])
    return ids


def update_drifts(cur: psycopg.Cursor, points: Sequence[tuple[int, NewChangePoint]]) -> None:
    """Bring stored drifts up to date, each ``(stored measurement id, as judged now)``: a
    drift that was open when stored ends at the night it stopped, with its level and slope
    as the longer history gives them."""
    for measurement_id, p in points:
        cur.execute(
            """
            UPDATE change_points SET drift_slope = %s, drift_end_measurement_id = %s,
                drift_open = %s, after_ns = %s, rel_change = %s
            WHERE series_id = %s AND measurement_id = %s AND drift_slope IS NOT NULL""",
            (*_drift_values(p.drift), p.after_ns, p.rel_change, p.series_id, measurement_id),
        )


def _drift_values(drift: StoredDrift | None) -> tuple[float | None, int | None, bool | None]:
    if drift is None:
        return None, None, None
    return drift.slope, drift.end_measurement_id, drift.open


def open_regression(
    cur: psycopg.Cursor, repository_id: int, regression: NewRegression, actor: str
) -> int:
    """Open an ``untriaged`` regression over its change points; its id."""
    row = cur.execute(
        """
        INSERT INTO regressions (repository_id, title, cause, magnitude, good_commit_id,
            bad_commit_id, kind, opened_by)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s) RETURNING id""",
        (
            repository_id,
            regression.title,
            regression.cause,
            regression.magnitude,
            regression.good_commit_id,
            regression.bad_commit_id,
            regression.kind,
            regression.opened_by,
        ),
    ).fetchone()
    regression_id = row[0]
    cur.execute(
        "UPDATE change_points SET regression_id = %s WHERE id = ANY(%s)",
        (regression_id, list(regression.change_point_ids)),
    )
    opened = f"opened by detection over {len(regression.change_point_ids)} series"
    add_event(cur, regression_id, actor, regression.note or opened, "untriaged")
    return regression_id


def open_members(cur: psycopg.Cursor, repository_id: int) -> list[OpenMember]:
    """The change points of every open regression of a repository."""
    rows = cur.execute(
        f"""
        SELECT g.id, g.state, g.assignee, g.bug_url, cp.series_id, cp.measurement_id,
            cp.rel_change
        FROM regressions g JOIN change_points cp ON cp.regression_id = g.id
        WHERE g.repository_id = %s AND g.state IN {OPEN_SQL}
        ORDER BY g.id""",
        (repository_id,),
    ).fetchall()
    return [
        OpenMember(r[0], Triage(state=r[1], assignee=r[2], bug=r[3]), r[4], r[5], r[6])
        for r in rows
    ]
