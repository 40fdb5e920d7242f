"""Nothing a bad input does loses a night: spool poison pills are set aside with their
reason and the rest replay; text a kernel wrote that PostgreSQL cannot hold is stored
cleaned; whatever the database refuses is spooled; two replays at once are safe (issue 17)."""

from __future__ import annotations

import threading

import psycopg

from kernelwatch.config.database import StoreConfig
from kernelwatch.store.runfile import write_run_file
from kernelwatch.store.spool import REJECTED, Submitter, pending, replay, spool_run


def _config(url: str, tmp_path) -> StoreConfig:
    return StoreConfig(url=url, spool_dir=tmp_path / "spool", pg_dir=tmp_path / "pg")


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(sql).fetchone()[0]


def test_spool_poison_pills_move_to_rejected_and_the_rest_replay(
    store_url, tmp_path, make_run, make_run_info, make_correctness
):
    config = _config(store_url, tmp_path)
    spool = config.spool_dir
    spool.mkdir()
    (spool / "utf8.jsonl").write_bytes(b'{"kind": "run_info", "x": "\xff\xfe"}\n')
    write_run_file(
        make_run([make_correctness()], make_run_info(run_id="not-a-uuid")), spool / "uuid.jsonl"
    )
    write_run_file(
        make_run([make_correctness()], make_run_info(trigger="hostile")), spool / "check.jsonl"
    )
    (spool / "dir.jsonl").mkdir()
    nul = make_run([make_correctness(verdict="error", detail="abort\x00\udcff tail")])
    good = make_run([make_correctness()])
    spool_run(nul, spool)
    spool_run(good, spool)

    report = replay(config)

    assert sorted(report.loaded) == sorted([nul.info.run_id, good.info.run_id])
    rejected = {path.name: reason for path, reason in report.rejected}
    assert set(rejected) == {"utf8.jsonl", "uuid.jsonl", "check.jsonl", "dir.jsonl"}
    for name, reason in rejected.items():
        assert reason and "\n" not in reason
        assert (spool / REJECTED / f"{name}.reason").read_text().strip() == reason
    assert pending(spool) == []
    detail = _count(
        store_url, "SELECT count(*) FROM correctness_results WHERE detail LIKE '%\ufffd%'"
    )
    assert detail == 1


def test_kernel_nul_byte_on_stderr_is_stored_cleaned_not_a_traceback(
    store_url, tmp_path, make_run, make_correctness
):
    run = make_run([make_correctness(verdict="error", reason="died", detail="x\x00y\udc80")])
    submitter = Submitter(_config(store_url, tmp_path))
    try:
        outcome = submitter.submit(run)
    finally:
        submitter.close()
    assert outcome.result is not None and outcome.result.stored
    stored = _count(
        store_url, "SELECT count(*) FROM correctness_results WHERE detail = 'x\ufffdy\ufffd'"
    )
    assert stored == 1


def test_a_run_the_database_refuses_is_spooled_not_lost(
    store_url, tmp_path, make_run, make_run_info, make_correctness
):
    run = make_run([make_correctness()], make_run_info(run_id="not-a-uuid"))
    submitter = Submitter(_config(store_url, tmp_path))
    try:
        outcome = submitter.submit(run)
    finally:
        submitter.close()
    assert outcome.spooled is not None and outcome.spooled.exists()
    assert outcome.reason and "\n" not in outcome.reason


def test_two_replays_at_once_neither_crash_nor_duplicate(
    store_url, tmp_path, make_run, make_correctness
):
    config = _config(store_url, tmp_path)
    runs = [make_run([make_correctness()]) for _ in range(6)]
    for run in runs:
        spool_run(run, config.spool_dir)
    reports, errors = [], []

    def go() -> None:
        try:
            reports.append(replay(config))
        except Exception as exc:  # the test's point: none may escape
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    loaded = [run_id for report in reports for run_id in report.loaded]
    assert sorted(loaded) == sorted(r.info.run_id for r in runs)
    assert _count(store_url, "SELECT count(*) FROM runs") == len(runs)


def test_a_deeply_nested_spool_file_is_rejected_and_the_genuine_run_behind_it_replays(
    store_url, tmp_path, make_run, make_correctness
):
    """``{"a":`` 100,000 times: json's decoder gives up with RecursionError, which used to end
    ``db replay`` in a traceback and leave the genuine run behind it stuck."""
    config = _config(store_url, tmp_path)
    spool = config.spool_dir
    spool.mkdir()
    (spool / "0-deep.jsonl").write_text('{"a":' * 100_000 + "\n")
    good = make_run([make_correctness()])
    spool_run(good, spool)

    report = replay(config)

    assert report.loaded == [good.info.run_id]
    ((rejected, reason),) = report.rejected
    assert rejected.name == "0-deep.jsonl"
    assert "nested too deep" in reason and "\n" not in reason
    assert pending(spool) == []
