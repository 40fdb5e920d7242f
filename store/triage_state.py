"""Triage state of regressions in the store: list, show, move between states, and reset a
baseline at a commit. The rules (which moves are allowed, what a reset closes) are
``kernelwatch.analysis.triage_rules``'s; this module only reads and writes them, one transaction
per action, with every move kept in ``regression_events``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from kernelwatch.analysis.triage_rules import OPEN, State, Triage, move

OPEN_SQL = "(" + ", ".join(f"'{state}'" for state in sorted(OPEN)) + ")"


class TriageNotFound(LookupError):
    """No regression, repository or commit by that name."""


@dataclass(frozen=True)
class Moved:
    """The outcome of one triage action on one regression."""

    regression_id: int
    before: str
    after: str


def list_regressions(
    conn: psycopg.Connection, state: str = "open", repository: str | None = None
) -> list[dict[str, Any]]:
    """Regressions in ``state`` (a triage state, or ``open``/``closed``/``all``), newest
    first, from the ``report_regressions`` view dashboards read."""
    where = {
        "open": "open",
        "closed": "NOT open",
        "all": "true",
    }.get(state, "state = %(state)s")
    sql = f"""
        SELECT * FROM report_regressions
        WHERE {where} AND (%(repository)s::text IS NULL OR repository = %(repository)s)
        ORDER BY created_at DESC, regression_id DESC"""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, {"state": state, "repository": repository}).fetchall()


def show_regression(conn: psycopg.Connection, regression_id: int) -> dict[str, Any]:
    """One regression with its change points (the series it groups, or for a serving
    regression the deployment's metrics that moved) and its triage history."""
    with conn.cursor(row_factory=dict_row) as cur:
        head = cur.execute(
            "SELECT * FROM report_regressions WHERE regression_id = %s", (regression_id,)
        ).fetchone()
        if head is None:
            raise TriageNotFound(f"no regression #{regression_id}; see `kernelwatch regressions`")
        head["change_point_list"] = cur.execute(
            """
            SELECT s.key AS series_key, k.name AS kernel, s.params, s.dtype, s.device_model,
                cp.direction, cp.rel_change, cp.before_ns, cp.after_ns, cp.at,
                c.sha AS commit_sha
            FROM change_points cp
                JOIN series s ON s.id = cp.series_id
                JOIN kernels k ON k.id = s.kernel_id
                LEFT JOIN commits c ON c.id = cp.commit_id
            WHERE cp.regression_id = %s
            ORDER BY abs(cp.rel_change) DESC, s.key""",
            (regression_id,),
        ).fetchall()
        # A serving regression's members: the deployment's metrics that moved at its run.
        head["serving_change_list"] = cur.execute(
            """
            SELECT d.name AS deployment, sc.metric, sc.direction, sc.rel_change,
                sc.provisional, r.started_at, r.kernel_commit,
                p.kernel_commit AS previous_kernel_commit, r.id AS run_pk,
                p.id AS previous_run_pk, sc.explanation
            FROM serving_changes sc
                JOIN deployments d ON d.id = sc.deployment_id
                JOIN serving_runs r ON r.id = sc.run_pk
                JOIN serving_runs p ON p.id = sc.previous_run_pk
            WHERE sc.regression_id = %s
            ORDER BY abs(sc.rel_change) DESC, sc.metric""",
            (regression_id,),
        ).fetchall()
        head["events"] = cur.execute(
            "SELECT at, actor, state, note FROM regression_events WHERE regression_id = %s "
            "ORDER BY at, id",
            (regression_id,),
        ).fetchall()
    return head


def apply_move(
    conn: psycopg.Connection,
    regression_id: int,
    to: State,
    actor: str,
    note: str | None = None,
    assignee: str | None = None,
    bug: str | None = None,
) -> Moved:
    """Move a regression to ``to`` if the triage rules allow it (``TriageError`` otherwise),
    recording who did it and why. Commits on success."""
    with conn.transaction(), conn.cursor() as cur:
        row = cur.execute(
            "SELECT state, assignee, bug_url FROM regressions WHERE id = %s FOR UPDATE",
            (regression_id,),
        ).fetchone()
        if row is None:
            raise TriageNotFound(f"no regression #{regression_id}; see `kernelwatch regressions`")
        before = Triage(state=row[0], assignee=row[1], bug=row[2])
        after = move(before, to, note=note, assignee=assignee, bug=bug)
        write_move(cur, regression_id, after, actor, note or "")
    return Moved(regression_id, before.state, after.state)


def reset_baseline(
    conn: psycopg.Connection,
    repository: str,
    commit_sha: str,
    actor: str,
    note: str,
    kernel: str | None = None,
) -> list[Moved]:
    """Accept the level at ``commit_sha`` as the new baseline (an intended change): annotate
    it, so detection starts afresh after it, and close the open regressions of that
    repository (of ``kernel``'s series only, if given) whose change is at or before that
    commit as ``wont_fix``. History is kept; only alerting restarts."""
    with conn.transaction(), conn.cursor() as cur:
        # The reset takes effect at the last time that commit was measured (its author time
        # if it never was): change points are stamped with measurement times.
        found = cur.execute(
            """
            SELECT repo.id, c.id, coalesce(
                (SELECT max(coalesce(r.finished_at, r.started_at)) FROM runs r
                 WHERE r.commit_id = c.id), c.author_time, now())
            FROM repositories repo JOIN commits c ON c.repository_id = repo.id
            WHERE repo.name = %s AND c.sha LIKE %s || '%%'""",
            (repository, commit_sha),
        ).fetchall()
        if len(found) != 1:
            what = "no" if not found else "more than one"
            raise TriageNotFound(
                f"{what} commit {commit_sha!r} in repository {repository!r} is stored; "
                f"give a full sha of a commit kernelwatch has measured"
            )
        repository_id, commit_id, at = found[0]
        kernel_id = _kernel_id(cur, repository_id, kernel)
        cur.execute(
            """
            INSERT INTO annotations (at, kind, text, repository_id, commit_id, author, series_id)
            SELECT %(at)s, 'baseline_reset', %(text)s, %(repo)s, %(commit)s, %(actor)s, s.id
            FROM series s WHERE s.kernel_id = %(kernel)s
            UNION ALL
            SELECT %(at)s, 'baseline_reset', %(text)s, %(repo)s, %(commit)s, %(actor)s, NULL
            WHERE %(kernel)s::int IS NULL""",
            {
                "at": at,
                "text": note,
                "repo": repository_id,
                "commit": commit_id,
                "actor": actor,
                "kernel": kernel_id,
            },
        )
        return _close_before(cur, repository_id, kernel_id, at, actor, commit_sha, note)


def _close_before(
    cur: psycopg.Cursor,
    repository_id: int,
    kernel_id: int | None,
    at: datetime,
    actor: str,
    commit_sha: str,
    note: str,
) -> list[Moved]:
    rows = cur.execute(
        f"""
        SELECT id, state, assignee, bug_url FROM regressions
        WHERE repository_id = %s AND state IN {OPEN_SQL} AND id IN (
            SELECT cp.regression_id FROM change_points cp JOIN series s ON s.id = cp.series_id
            WHERE cp.at <= %s AND (%s::int IS NULL OR s.kernel_id = %s))
        ORDER BY id FOR UPDATE""",
        (repository_id, at, kernel_id, kernel_id),
    ).fetchall()
    moved = []
    for regression_id, state, assignee, bug in rows:
        text = f"intended change: baseline reset at {commit_sha}" + (f" ({note})" if note else "")
        after = move(Triage(state=state, assignee=assignee, bug=bug), "wont_fix", note=text)
        write_move(cur, regression_id, after, actor, text)
        moved.append(Moved(regression_id, state, after.state))
    return moved


def _kernel_id(cur: psycopg.Cursor, repository_id: int, kernel: str | None) -> int | None:
    if kernel is None:
        return None
    row = cur.execute(
        "SELECT id FROM kernels WHERE repository_id = %s AND name = %s", (repository_id, kernel)
    ).fetchone()
    if row is None:
        raise TriageNotFound(f"no kernel {kernel!r} is stored for this repository")
    return row[0]


def write_move(
    cur: psycopg.Cursor, regression_id: int, after: Triage, actor: str, note: str
) -> None:
    """Store a regression's new triage record and the event that made it."""
    closed = after.state not in OPEN
    cur.execute(
        """
        UPDATE regressions SET state = %s, assignee = %s, bug_url = %s, updated_at = now(),
            resolved_at = CASE WHEN %s THEN now() END,
            notes = CASE WHEN %s = '' THEN notes
                         WHEN notes = '' THEN %s ELSE notes || E'\\n' || %s END
        WHERE id = %s""",
        (after.state, after.assignee, after.bug, closed, note, note, note, regression_id),
    )
    add_event(cur, regression_id, actor, note, after.state)


def add_event(
    cur: psycopg.Cursor, regression_id: int, actor: str, note: str, state: str | None = None
) -> None:
    """One line of a regression's history (``regression_events``): who, the state it was
    left in (None: not changed by this event) and why."""
    cur.execute(
        "INSERT INTO regression_events (regression_id, actor, state, note) VALUES (%s, %s, %s, %s)",
        (regression_id, actor, state, note),
    )
