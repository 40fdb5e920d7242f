"""Issue 43: the serving-ingest flow reads the folder a serving benchmark job drops its
results in (kernelwatch.toml's [serving] folder), stores every new run, judges the
deployments that got one, and fails, naming the file, when a file cannot be read: after the
others are stored. Its deployment is planned from the configuration."""

from __future__ import annotations

import json

import psycopg
import pytest
from serving_files import nightly_history, sglang_line, sglang_text, vllm_result

from kernelwatch.config.settings import ConfigError, parse
from kernelwatch.flows.deployments import plan
from kernelwatch.flows.serving_results import serving_ingest
from kernelwatch.store.triage_state import list_regressions

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def folder(tmp_path, monkeypatch, store_url):
    drop = tmp_path / "drop"
    drop.mkdir()
    config = tmp_path / "kernelwatch.toml"
    config.write_text(f'[serving]\nfolder = "{drop}"\n')
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    return drop


def test_a_dropped_history_is_stored_judged_and_a_bad_file_fails_the_run_last(folder, store_url):
    for i, result in enumerate(nightly_history([20.0] * 20 + [21.2] * 15, [5000.0] * 35)):
        (folder / f"vllm-{i:02d}.json").write_text(json.dumps(result))
    (folder / "truncated.json").write_text(json.dumps(vllm_result())[:300])
    # SGLang's lines name no deployment, and no command line gives this folder one.
    (folder / "sglang.jsonl").write_text(sglang_text(sglang_line()))
    (folder / "notes.txt").write_text("not a result")

    state = serving_ingest(return_state=True)
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert "2 file(s)" in message and "could not be read (the others are stored)" in message
    with psycopg.connect(store_url) as conn:
        assert conn.execute("SELECT count(*) FROM serving_runs").fetchone()[0] == 35
        (regression,) = list_regressions(conn)
    assert regression["kind"] == "serving" and "p99_tpot_ms" in regression["title"]

    for name in ("truncated.json", "sglang.jsonl"):
        (folder / name).unlink()
    summary = serving_ingest()
    assert (summary.ingested.stored, summary.ingested.already) == (0, 35)
    assert summary.opened == () and summary.ingested.deployments == ()


def test_a_new_nights_file_is_judged_with_the_history_before_it(folder, store_url):
    history = nightly_history([20.0] * 20 + [21.2] * 15, [5000.0] * 35)
    for i, result in enumerate(history[:22]):
        (folder / f"vllm-{i:02d}.json").write_text(json.dumps(result))
    first = serving_ingest()
    # Two runs past the step: a provisional change already opens the regression.
    assert first.ingested.deployments == ("chat-8b",) and len(first.opened) == 1
    (folder / "vllm-22.json").write_text(json.dumps(history[22]))
    later = serving_ingest()
    assert later.ingested.stored == 1 and later.opened == ()
    with psycopg.connect(store_url) as conn:
        assert len(list_regressions(conn)) == 1


def test_the_folder_gets_a_scheduled_deployment_in_its_work_pool():
    config = parse({"serving": {"folder": "/srv/serving-results", "cron": "15 * * * *"}}, None)
    (spec,) = [s for s in plan(config) if s.flow == "serving_ingest"]
    assert (spec.work_pool, spec.cron, spec.parameters) == (
        "local",
        "15 * * * *",
        {"folder": "/srv/serving-results"},
    )
    assert not [s for s in plan(parse({}, None)) if s.flow == "serving_ingest"]
    with pytest.raises(ConfigError, match=r"\[serving\].*cron"):
        parse({"serving": {"folder": "x", "cron": "every hour"}}, None)
