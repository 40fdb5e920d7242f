"""Device seconds per run and stage (issue 49), as the store keeps them: a run's own stages
are written with it, once however often it is submitted; a later stage is added to the
stored run; a run file naming a stage that is not one is refused in one line."""

from __future__ import annotations

import json

import psycopg
import pytest
from factories import correctness, measurement, run, run_info

from kernelwatch.harness.records import RecordError, StageTime
from kernelwatch.store.device_time import add_stage
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import read_run_file, write_run_file


def _stages(conn: psycopg.Connection, run_id: str) -> list[tuple[str, float, int]]:
    return conn.execute(
        "SELECT stage, device_s, cases FROM report_device_time WHERE run_id = %s ORDER BY stage",
        (run_id,),
    ).fetchall()


def test_a_runs_stages_are_stored_once_and_a_later_stage_adds_to_them(store_url):
    stages = (StageTime("check", 12.5, 1), StageTime("bench", 30.25, 1))
    stored = run([correctness(), measurement()], run_info(stages=stages))
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        assert ingester.ingest(stored).stored and not ingester.ingest(stored).stored
        run_id = stored.info.run_id
        assert _stages(conn, run_id) == [("bench", 30.25, 1), ("check", 12.5, 1)]
        # The same night's A/B, in two rounds: one row each, summed per stage by the view.
        assert add_stage(conn, run_id, StageTime("ab", 4.0, 2))
        assert add_stage(conn, run_id, StageTime("ab", 6.0, 1))
        assert ("ab", 10.0, 3) in _stages(conn, run_id)
        assert not add_stage(conn, "00000000-0000-0000-0000-000000000000", StageTime("ab", 1.0))


def test_a_run_file_with_an_unknown_stage_or_negative_seconds_is_refused(tmp_path):
    path = tmp_path / "run.jsonl"
    write_run_file(run([correctness()], run_info(stages=(StageTime("check", 1.0, 1),))), path)
    assert read_run_file(path).info.stages == (StageTime("check", 1.0, 1),)
    header, *rest = path.read_text().splitlines()
    for bad in ({"stage": "warmup", "device_s": 1.0}, {"stage": "check", "device_s": -1.0}):
        info = {**json.loads(header), "stages": [bad]}
        path.write_text("\n".join([json.dumps(info), *rest]) + "\n")
        with pytest.raises(RecordError, match=r"run\.jsonl:1: malformed run record") as raised:
            read_run_file(path)
        assert "\n" not in str(raised.value)
