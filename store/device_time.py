"""Device seconds per run and stage (the ``device_time`` table, migration 0024): a run's own
stages are written with it by ingest; a stage run for a stored run afterwards (the same
night's confirmation A/B of tonight's run) is added with :func:`add_stage`."""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from kernelwatch.harness.records import StageTime

_INSERT = "INSERT INTO device_time (run_id, stage, device_s, cases) VALUES (%s, %s, %s, %s)"


def insert_stages(cur: psycopg.Cursor, run_pk: int, stages: Iterable[StageTime]) -> None:
    """One row per stage of the run whose primary key is ``run_pk``."""
    rows = [(run_pk, s.stage, s.device_s, s.cases) for s in stages]
    if rows:
        cur.executemany(_INSERT, rows)


def add_stage(conn: psycopg.Connection, run_id: str, stage: StageTime) -> bool:
    """Add ``stage`` to the stored run ``run_id`` (its UUID); False when no such run is
    stored (it was spooled), so nothing was written."""
    with conn.transaction():
        row = conn.execute("SELECT id FROM runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            return False
        insert_stages(conn.cursor(), row[0], [stage])
    return True
