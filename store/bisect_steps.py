"""Writing a bisection: one ``bisect_steps`` row per probe and case, and the culprit onto
the regression it was started for. The search itself is ``kernelwatch.analysis.bisect_search``'s;
the probed commits' runs are ingested (trigger ``bisect``) by the caller beforehand.
"""

from __future__ import annotations

from collections.abc import Mapping
from uuid import UUID

import psycopg

from kernelwatch.analysis.bisect_search import FAILING, BisectOutcome, Step
from kernelwatch.harness.records import CommitInfo, DeviceInfo
from kernelwatch.store.triage_state import TriageNotFound, add_event

ACTOR = "bisect"

_STEP_COLUMNS = (
    "bisect_id", "step", "regression_id", "repository_id", "device_id", "series_id",
    "good_commit_id", "probe_commit_id", "verdict", "ratio", "ci_low", "ci_high", "samples",
    "gpu_seconds", "note",
)  # fmt: skip


def record_bisection(
    conn: psycopg.Connection,
    outcome: BisectOutcome,
    *,
    bisect_id: str | UUID,
    repository: str,
    regression_id: int | None,
    device: DeviceInfo,
    series: Mapping[str, str],
    commits: Mapping[str, CommitInfo],
) -> None:
    """Store ``outcome`` in one transaction; a bisection already stored is left alone.

    ``series`` maps each case name the probes used to its series key
    (``store.identity.series_key``); a key not stored yet leaves the rows' ``series_id``
    empty. ``commits`` describes commits the store may not have yet (the good end and every
    probed commit must be either stored or described). With ``regression_id``, the
    regression gets the culprit when one was found, and in any case a ``regression_events``
    entry by ``bisect`` saying what the bisection concluded and how sure it is.
    """
    unmapped = sorted({c for step in outcome.steps for c in _cases(step)} - set(series))
    if unmapped:
        raise ValueError(f"no series key given for case {', '.join(unmapped)}")
    with conn.transaction(), conn.cursor() as cur:
        stored = cur.execute(
            "SELECT 1 FROM bisect_steps WHERE bisect_id = %s LIMIT 1", (bisect_id,)
        ).fetchone()
        if stored is not None:
            return
        state = None if regression_id is None else _lock_regression(cur, regression_id)
        repository_id = _id(
            cur,
            "INSERT INTO repositories (name) VALUES (%s) "
            "ON CONFLICT (name) DO UPDATE SET name = EXCLUDED.name RETURNING id",
            (repository,),
        )
        device_id = _device_id(cur, device)
        shas = {outcome.good, *(step.commit for step in outcome.steps)}
        commit_ids = _commit_ids(cur, repository_id, shas, commits)
        series_ids = dict(
            cur.execute(
                "SELECT key, id FROM series WHERE key = ANY(%s)", (sorted(set(series.values())),)
            ).fetchall()
        )
        rows = [
            (bisect_id, number, regression_id, repository_id, device_id,
             series_ids.get(series[case]), commit_ids[outcome.good], commit_ids[step.commit],
             *_row(step, case))
            for number, step in enumerate(outcome.steps)
            for case in _cases(step)
        ]  # fmt: skip
        cur.executemany(
            f"INSERT INTO bisect_steps ({', '.join(_STEP_COLUMNS)}) "
            f"VALUES ({', '.join(['%s'] * len(_STEP_COLUMNS))})",
            rows,
        )
        if regression_id is not None:
            culprit_id = commit_ids[outcome.culprit] if outcome.culprit else None
            _tell_regression(cur, regression_id, state, culprit_id, outcome.evidence())


def _cases(step: Step) -> list[str]:
    """The cases one probe reported, measured, checked or not, in a stable order."""
    return sorted({*step.verdicts, *step.errors, *step.checks})


def _row(step: Step, case: str) -> tuple[object, ...]:
    """verdict, ratio, ci_low, ci_high, samples, gpu_seconds, note of one (step, case). The
    probe's cost is shared evenly by its cases, so the rows of a bisection sum to its cost."""
    share = step.gpu_seconds / len(_cases(step))
    note = f"round {step.round}: commit judged {step.judgement}"
    if case in step.errors:
        return ("ERROR", None, None, None, 0, share, f"{note}; {step.errors[case]}")
    if case in step.checks:
        verdict = step.checks[case]
        name = "FAIL" if verdict in FAILING else "PASS"
        return (name, None, None, None, 0, share, f"{note}; correctness check: {verdict}")
    v = step.verdicts[case]
    return (v.verdict, v.ratio, v.ci_low, v.ci_high, v.n_a + v.n_b, share, f"{note}; {v.reason}")


def _commit_ids(
    cur: psycopg.Cursor, repository_id: int, shas: set[str], commits: Mapping[str, CommitInfo]
) -> dict[str, int]:
    """The ids of ``shas``, storing from ``commits`` those the store does not have."""
    for sha in sorted(shas & set(commits)):
        c = commits[sha]
        cur.execute(
            """INSERT INTO commits (repository_id, sha, parents, author_time, message, branch)
            VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (repository_id, sha) DO NOTHING""",
            (repository_id, c.sha, list(c.parents), c.author_time, c.message, c.branch),
        )
    found = dict(
        cur.execute(
            "SELECT sha, id FROM commits WHERE repository_id = %s AND sha = ANY(%s)",
            (repository_id, sorted(shas)),
        ).fetchall()
    )
    unknown = sorted(shas - set(found))
    if unknown:
        raise ValueError(
            f"commit {', '.join(unknown)} is neither stored nor described in `commits`"
        )
    return found


def _lock_regression(cur: psycopg.Cursor, regression_id: int) -> str:
    """The regression's triage state, locked until the transaction ends."""
    row = cur.execute(
        "SELECT state FROM regressions WHERE id = %s FOR UPDATE", (regression_id,)
    ).fetchone()
    if row is None:
        raise TriageNotFound(f"no regression #{regression_id} to record the bisection on")
    return row[0]


def _tell_regression(
    cur: psycopg.Cursor, regression_id: int, state: str | None, culprit_id: int | None, note: str
) -> None:
    """Set the culprit (when found) and keep what the bisection concluded in the
    regression's history; its triage state stays as it is."""
    if culprit_id is not None:
        cur.execute(
            "UPDATE regressions SET culprit_commit_id = %s, updated_at = now() WHERE id = %s",
            (culprit_id, regression_id),
        )
    add_event(cur, regression_id, ACTOR, note, state)


def _device_id(cur: psycopg.Cursor, device: DeviceInfo) -> int:
    return _id(
        cur,
        """INSERT INTO devices (kind, model, host, uuid, arch, sm_count, l2_bytes, interpreter)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
        ON CONFLICT (kind, model, host, uuid, arch, sm_count, l2_bytes, interpreter)
            DO UPDATE SET kind = EXCLUDED.kind RETURNING id""",
        (device.kind, device.name, device.host, device.uuid, device.capability,
         device.sm_count, device.l2_bytes, device.interpreter),
    )  # fmt: skip


def _id(cur: psycopg.Cursor, sql: str, params: tuple[object, ...]) -> int:
    return cur.execute(sql, params).fetchone()[0]
