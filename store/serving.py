"""Serving runs in the store: ingest (one transaction a run, idempotent by run key), and the
per-deployment history and per-request samples the serving judge reads.

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

from kernelwatch.serving.results import Deployment, HistoryPoint, ServingRun

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
            copy_sql = (
                "COPY serving_samples (run_pk, latency, values_ms) FROM STDIN (FORMAT BINARY)"
            )
            with cur.copy(copy_sql) as copy:
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
