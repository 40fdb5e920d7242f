"""Serving runs in the store: ingest (one transaction a run, idempotent by run key), the
per-deployment history and per-request samples the serving judge reads, and what it found
(change points, and the serving regressions they open).

A run whose key is already stored is skipped, so a folder of result files can be ingested
again whole. Its deployment row is found or made first (a new deployment's row commits with
its run). Failed runs are stored like any other and left out of every history read here:
they never become a baseline.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from kernelwatch.serving.judge import ServingChange, ServingFinding
from kernelwatch.serving.names import KnownKernel
from kernelwatch.serving.results import Deployment, HistoryPoint, ServingRun
from kernelwatch.serving.traces import KernelTime, TraceProfile
from kernelwatch.store.triage_state import OPEN_SQL, add_event

_DEPLOYMENT_COLUMNS = ("name", "model", "engine", "gpu", "gpu_count", "tp", "ep", "load",
                       "dataset")  # fmt: skip
_FIND_DEPLOYMENT = (
    f"SELECT id FROM deployments WHERE {' AND '.join(f'{c} = %s' for c in _DEPLOYMENT_COLUMNS)}"
)
_INSERT_DEPLOYMENT = (
    f"INSERT INTO deployments ({', '.join(_DEPLOYMENT_COLUMNS)}) "
    f"VALUES ({', '.join(['%s'] * len(_DEPLOYMENT_COLUMNS))}) "
    "ON CONFLICT DO NOTHING RETURNING id"
)
_INSERT_RUN = """
INSERT INTO serving_runs (run_key, deployment_id, source, kernel_commit, engine_version,
    started_at, status, completed, failed, duration_s, input_tokens, output_tokens,
    simulated, extra)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (run_key) DO NOTHING RETURNING id"""
_COPY_SAMPLES = "COPY serving_samples (run_pk, latency, values_ms) FROM STDIN (FORMAT BINARY)"


@dataclass(frozen=True)
class Stored:
    """What ingesting one run did: ``run_pk`` its row, ``stored`` False when the run was
    already there (nothing written)."""

    key: str
    run_pk: int
    stored: bool


def ingest(conn: psycopg.Connection, run: ServingRun) -> Stored:
    """Store ``run`` (its deployment, summary metrics and per-request samples) in one
    transaction; an already stored run is left as it is."""
    with conn.transaction(), conn.cursor() as cur:
        deployment = _deployment_id(cur, run.deployment)
        cur.execute(
            _INSERT_RUN,
            (run.key, deployment, run.source, run.kernel_commit, run.engine_version,
             run.started_at, run.status, run.completed, run.failed, run.duration_s,
             run.input_tokens, run.output_tokens, run.simulated, Jsonb(dict(run.extra))),
        )  # fmt: skip
        row = cur.fetchone()
        if row is None:
            (existing,) = cur.execute(
                "SELECT id FROM serving_runs WHERE run_key = %s", (run.key,)
            ).fetchone()
            return Stored(run.key, existing, False)
        run_pk = row[0]
        cur.executemany(
            "INSERT INTO serving_metrics (run_pk, metric, value) VALUES (%s, %s, %s)",
            [(run_pk, name, value) for name, value in sorted(run.metrics.items())],
        )
        if run.samples:
            with cur.copy(_COPY_SAMPLES) as copy:
                copy.set_types(["int8", "text", "float4[]"])
                for latency, values in sorted(run.samples.items()):
                    copy.write_row((run_pk, latency, list(values)))
        return Stored(run.key, run_pk, True)


def _deployment_id(cur: psycopg.Cursor, deployment: Deployment) -> int:
    key = tuple(getattr(deployment, c) for c in _DEPLOYMENT_COLUMNS)
    row = cur.execute(_INSERT_DEPLOYMENT, key).fetchone()
    if row is None:  # already there, or a concurrent writer's just committed
        row = cur.execute(_FIND_DEPLOYMENT, key).fetchone()
    return row[0]


def deployments(conn: psycopg.Connection) -> list[tuple[int, Deployment]]:
    """Every deployment with its id, in id order."""
    rows = conn.execute(
        f"SELECT id, {', '.join(_DEPLOYMENT_COLUMNS)} FROM deployments ORDER BY id"
    ).fetchall()
    return [(row[0], Deployment(*row[1:])) for row in rows]


def history(conn: psycopg.Connection, deployment_id: int, metric: str) -> list[HistoryPoint]:
    """The deployment's ok runs that recorded ``metric``, in time order (ties by id)."""
    rows = conn.execute(
        """SELECT r.id, r.started_at, r.kernel_commit, m.value
        FROM serving_runs r JOIN serving_metrics m ON m.run_pk = r.id AND m.metric = %s
        WHERE r.deployment_id = %s AND r.status = 'ok'
        ORDER BY r.started_at, r.id""",
        (metric, deployment_id),
    ).fetchall()
    return [HistoryPoint(*row) for row in rows]


def samples(conn: psycopg.Connection, run_pk: int, latency: str) -> np.ndarray | None:
    """The run's per-request ``latency`` values in ms; None when it stored none."""
    row = conn.execute(
        "SELECT values_ms FROM serving_samples WHERE run_pk = %s AND latency = %s",
        (run_pk, latency),
    ).fetchone()
    return None if row is None else np.asarray(row[0], dtype=np.float64)


def runs(conn: psycopg.Connection, keys: Sequence[str]) -> dict[str, str]:
    """The stored status of each run key of ``keys`` that is stored."""
    rows = conn.execute(
        "SELECT run_key, status FROM serving_runs WHERE run_key = ANY(%s)", (list(keys),)
    ).fetchall()
    return dict(rows)


@dataclass(frozen=True)
class Recorded:
    """What storing one deployment's judgement did: change points new to the store, and
    the regressions opened (ids) or grown (a run's worse metric found later joins the
    regression its run already opened)."""

    new_changes: int
    opened: tuple[int, ...]
    grown: tuple[int, ...]


_UPSERT_CHANGE = """
INSERT INTO serving_changes (deployment_id, metric, run_pk, previous_run_pk, direction,
    rel_change, p_value, provisional)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (deployment_id, metric, run_pk) DO UPDATE
    SET provisional = serving_changes.provisional AND EXCLUDED.provisional,
        rel_change = EXCLUDED.rel_change, p_value = EXCLUDED.p_value,
        previous_run_pk = EXCLUDED.previous_run_pk
RETURNING id, regression_id, xmax = 0"""


def record(
    conn: psycopg.Connection,
    deployment_id: int,
    changes: Sequence[ServingChange],
    found: Sequence[ServingFinding],
    actor: str,
) -> Recorded:
    """Store a deployment's change points (judging again updates them in place: a
    provisional change found settled is settled) and open a serving regression per finding
    whose run no regression holds yet, in one transaction."""
    with conn.transaction(), conn.cursor() as cur:
        ids: dict[tuple[str, int], tuple[int, int | None]] = {}
        new = 0
        for c in changes:
            row = cur.execute(
                _UPSERT_CHANGE,
                (deployment_id, c.metric, c.run.run_pk, c.previous.run_pk, c.direction,
                 c.magnitude_pct / 100.0, c.p_value, c.provisional),
            ).fetchone()  # fmt: skip
            ids[(c.metric, c.run.run_pk)] = (row[0], row[1])
            new += bool(row[2])
        opened, grown = [], []
        for finding in found:
            members = [ids[(c.metric, c.run.run_pk)] for c in finding.changes]
            unattached = [change_id for change_id, regression in members if regression is None]
            if not unattached:
                continue
            held = _regression_of_run(cur, deployment_id, finding.run.run_pk)
            if held is None:
                held = _open(cur, deployment_id, finding, actor)
                opened.append(held)
            else:
                grown.append(held)
            cur.execute(
                "UPDATE serving_changes SET regression_id = %s WHERE id = ANY(%s)",
                (held, unattached),
            )
    return Recorded(new, tuple(opened), tuple(grown))


def _regression_of_run(cur: psycopg.Cursor, deployment_id: int, run_pk: int) -> int | None:
    row = cur.execute(
        f"""SELECT g.id FROM regressions g JOIN serving_changes sc ON sc.regression_id = g.id
        WHERE sc.deployment_id = %s AND sc.run_pk = %s AND g.state IN {OPEN_SQL}
        ORDER BY g.id LIMIT 1""",
        (deployment_id, run_pk),
    ).fetchone()
    return None if row is None else row[0]


def _open(cur: psycopg.Cursor, deployment_id: int, finding: ServingFinding, actor: str) -> int:
    good = _commit(cur, finding.previous.kernel_commit)
    bad = _commit(cur, finding.run.kernel_commit)
    # The kernel repository is the one whose commit the bad run served, when kernelwatch
    # has stored that commit: the regression then lists with that repository's.
    repository = bad[1] if bad else good[1] if good else None
    (regression_id,) = cur.execute(
        """INSERT INTO regressions (repository_id, deployment_id, title, cause, magnitude,
            good_commit_id, bad_commit_id, kind, opened_by)
        VALUES (%s, %s, %s, 'unknown', %s, %s, %s, 'serving', 'change_point') RETURNING id""",
        (repository, deployment_id, finding.title, finding.magnitude,
         good[0] if good else None, bad[0] if bad else None),
    ).fetchone()  # fmt: skip
    opened = f"opened by serving detection over {len(finding.changes)} metric(s)"
    add_event(cur, regression_id, actor, opened, "untriaged")
    return regression_id


def _commit(cur: psycopg.Cursor, sha: str) -> tuple[int, int] | None:
    # A deployment names its kernel commit as its job knew it, often abbreviated: one
    # stored commit it is a prefix of, or none (ambiguous or unknown is not guessed).
    if len(sha) < 7:
        return None
    rows = cur.execute(
        "SELECT id, repository_id FROM commits WHERE sha LIKE %s LIMIT 2",
        (sha.replace("%", "").replace("_", "") + "%",),
    ).fetchall()
    return (rows[0][0], rows[0][1]) if len(rows) == 1 else None


def ingest_trace(conn: psycopg.Connection, run_pk: int, profile: TraceProfile) -> tuple[int, bool]:
    """Store a profiler trace's kernels for run ``run_pk`` in one transaction: the trace's
    id, and False when the same file was already stored for that run (nothing written)."""
    with conn.transaction(), conn.cursor() as cur:
        row = cur.execute(
            """INSERT INTO serving_traces (run_pk, digest, source, device, gpu_ns)
            VALUES (%s, %s, %s, %s, %s) ON CONFLICT (run_pk, digest) DO NOTHING RETURNING id""",
            (run_pk, profile.digest, profile.source, profile.device, profile.gpu_ns),
        ).fetchone()
        if row is None:
            (existing,) = cur.execute(
                "SELECT id FROM serving_traces WHERE run_pk = %s AND digest = %s",
                (run_pk, profile.digest),
            ).fetchone()
            return existing, False
        cur.executemany(
            "INSERT INTO serving_trace_kernels (trace_id, name, short_name, launches, gpu_ns, "
            "share) VALUES (%s, %s, %s, %s, %s, %s)",
            [(row[0], k.name, k.short_name, k.launches, k.gpu_ns, k.share)
             for k in profile.kernels],
        )  # fmt: skip
        return row[0], True


def trace(conn: psycopg.Connection, run_pk: int) -> TraceProfile | None:
    """The newest trace stored for run ``run_pk``; None when it has none."""
    head = conn.execute(
        "SELECT id, digest, source, device, gpu_ns FROM serving_traces WHERE run_pk = %s "
        "ORDER BY ingested_at DESC, id DESC LIMIT 1",
        (run_pk,),
    ).fetchone()
    if head is None:
        return None
    rows = conn.execute(
        "SELECT name, short_name, launches, gpu_ns, share FROM serving_trace_kernels "
        "WHERE trace_id = %s ORDER BY gpu_ns DESC, name",
        (head[0],),
    ).fetchall()
    return TraceProfile(head[1], head[2], head[3], head[4], tuple(KernelTime(*r) for r in rows))


def known_kernels(conn: psycopg.Connection, repository: str) -> list[KnownKernel]:
    """The kernels of ``repository`` with the functions their builds compiled and the
    baseline they are measured against, for matching a trace's kernel names."""
    rows = conn.execute(
        """SELECT k.name,
            coalesce(array_agg(DISTINCT b.function) FILTER (WHERE b.function IS NOT NULL),
                     '{}'),
            coalesce((SELECT m.baseline FROM series s JOIN measurements m ON m.series_id = s.id
                      WHERE s.kernel_id = k.id AND m.baseline IS NOT NULL LIMIT 1), '')
        FROM kernels k JOIN repositories r ON r.id = k.repository_id
            LEFT JOIN build_metrics b ON b.kernel_id = k.id AND b.status = 'ok'
        WHERE r.name = %s
        GROUP BY k.id ORDER BY k.name""",
        (repository,),
    ).fetchall()
    return [KnownKernel(name, tuple(functions), baseline) for name, functions, baseline in rows]


def latest_traced_run(conn: psycopg.Connection) -> int | None:
    """The newest run (by start time) that has a trace stored; None when none has."""
    row = conn.execute(
        "SELECT r.id FROM serving_runs r WHERE EXISTS (SELECT 1 FROM serving_traces t "
        "WHERE t.run_pk = r.id) ORDER BY r.started_at DESC, r.id DESC LIMIT 1"
    ).fetchone()
    return None if row is None else row[0]


def run_repository(conn: psycopg.Connection, run_pk: int) -> str | None:
    """The kernel repository whose commit run ``run_pk`` served: the one stored commit its
    kernel commit is a prefix of (at least 7 characters); None when unknown or ambiguous."""
    rows = conn.execute(
        """SELECT p.name FROM serving_runs r
            JOIN commits c ON length(r.kernel_commit) >= 7
                AND c.sha LIKE replace(replace(r.kernel_commit, '%%', ''), '_', '') || '%%'
            JOIN repositories p ON p.id = c.repository_id
        WHERE r.id = %s LIMIT 2""",
        (run_pk,),
    ).fetchall()
    return rows[0][0] if len(rows) == 1 else None


def kernel_ratios(
    conn: psycopg.Connection, repository: str, before: str, after: str, gpu: str = ""
) -> dict[str, float]:
    """Each kernel's change from commit ``before`` to ``after`` (full SHAs) in nightly
    history: per series the ratio of the two commits' medians, per kernel the geometric
    mean over its series measured at both (on GPU models whose name holds ``gpu``, when
    any was; else on every GPU model)."""
    sql = """
    WITH pts AS (
        SELECT k.name AS kernel, m.series_id, c.sha, s.device_model,
            percentile_cont(0.5) WITHIN GROUP (ORDER BY m.median_ns) AS median_ns
        FROM measurements m
            JOIN series s ON s.id = m.series_id
            JOIN kernels k ON k.id = s.kernel_id
            JOIN repositories r ON r.id = k.repository_id
            JOIN runs u ON u.id = m.run_id
            JOIN commits c ON c.id = u.commit_id
        WHERE r.name = %(repo)s AND m.history AND m.status = 'ok' AND m.median_ns > 0
            AND c.sha IN (%(before)s, %(after)s)
        GROUP BY k.name, m.series_id, c.sha, s.device_model
    ), pairs AS (
        SELECT a.kernel, a.device_model, ln(b.median_ns / a.median_ns) AS log_ratio
        FROM pts a JOIN pts b ON b.series_id = a.series_id
        WHERE a.sha = %(before)s AND b.sha = %(after)s
    ), chosen AS (
        SELECT * FROM pairs WHERE %(gpu)s = '' OR NOT EXISTS (
            SELECT 1 FROM pairs p WHERE strpos(lower(p.device_model), lower(%(gpu)s)) > 0)
        UNION ALL
        SELECT * FROM pairs WHERE %(gpu)s <> ''
            AND strpos(lower(device_model), lower(%(gpu)s)) > 0
    )
    SELECT kernel, exp(avg(log_ratio)) FROM chosen GROUP BY kernel"""
    rows = conn.execute(
        sql, {"repo": repository, "before": before, "after": after, "gpu": gpu}
    ).fetchall()
    return {kernel: float(ratio) for kernel, ratio in rows}


@dataclass(frozen=True)
class RunChange:
    """A worse metric of a serving regression that ends at a run (``trace_after``) or
    starts after it, with the kernel commits (full SHAs, None when kernelwatch has not
    measured them) and the deployment's GPU model."""

    change_id: int
    regression_id: int
    metric: str
    rel_change: float
    trace_after: bool
    before: str | None
    after: str | None
    gpu: str


def changes_around(conn: psycopg.Connection, run_pk: int) -> list[RunChange]:
    """The serving regressions' worse metrics whose change ends at run ``run_pk`` or
    starts right after it, biggest first."""
    rows = conn.execute(
        """SELECT sc.id, sc.regression_id, sc.metric, sc.rel_change, sc.run_pk = %(run)s,
            good.sha, bad.sha, d.gpu
        FROM serving_changes sc
            JOIN regressions g ON g.id = sc.regression_id
            JOIN deployments d ON d.id = sc.deployment_id
            LEFT JOIN commits good ON good.id = g.good_commit_id
            LEFT JOIN commits bad ON bad.id = g.bad_commit_id
        WHERE sc.direction = 'regression' AND %(run)s IN (sc.run_pk, sc.previous_run_pk)
        ORDER BY sc.regression_id, abs(sc.rel_change) DESC, sc.metric""",
        {"run": run_pk},
    ).fetchall()
    return [RunChange(*row) for row in rows]


def save_explanation(
    conn: psycopg.Connection, change_id: int, explained_pct: float, sentence: str
) -> None:
    """Keep what the kernels explain of serving change ``change_id``."""
    with conn.transaction():
        conn.execute(
            "UPDATE serving_changes SET explained_pct = %s, explanation = %s WHERE id = %s",
            (explained_pct, sentence, change_id),
        )


def traced_runs_around_changes(conn: psycopg.Connection, deployment_id: int) -> list[int]:
    """The deployment's traced runs at which a worse change of a serving regression ends
    or after which one starts, oldest first."""
    rows = conn.execute(
        """SELECT DISTINCT t.run_pk, r.started_at FROM serving_traces t
            JOIN serving_runs r ON r.id = t.run_pk
            JOIN serving_changes sc ON t.run_pk IN (sc.run_pk, sc.previous_run_pk)
        WHERE sc.deployment_id = %s AND sc.regression_id IS NOT NULL
        ORDER BY r.started_at, t.run_pk""",
        (deployment_id,),
    ).fetchall()
    return [row[0] for row in rows]
