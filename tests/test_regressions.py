"""Detection over stored history and triage through the store, on a real PostgreSQL: one
planted culprit across 20 series opens one regression, a second pass adds nothing, triage
moves follow the rules, recovery closes the alert, and a baseline reset closes and silences."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
import pytest
from factories import REPOSITORY, commit, measurement, run, run_info

from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.flows.detection import PassReport, detect_and_alert
from kernelwatch.harness.records import CaseId
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.runfile import Run

START = datetime(2026, 6, 1, tzinfo=UTC)


def _history(levels: list[float], series: int = 20, seed: int = 0, offset: int = 0) -> list[Run]:
    """One nightly run per commit, ``series`` rms_norm cases each; point i of every series
    sits at ``levels[i]`` times its base time."""
    rng = np.random.default_rng(seed)
    cases = [
        CaseId("builtin", "rms_norm", "llm", {"rows": 64 * (1 + s), "hidden": 4096}, "fp16")
        for s in range(series)
    ]
    runs = []
    for i, level in enumerate(levels, start=offset):
        when = START + timedelta(days=i)
        head = commit(f"{i:040x}", when, parents=(f"{i - 1:040x}",))
        info = run_info(when, run_id=str(uuid.UUID(int=i + 1)), commit=head)
        records = [
            measurement(c, 1000.0 * (1 + s / 10) * level * np.exp(rng.normal(0.0, 0.004, 15)))
            for s, c in enumerate(cases)
        ]
        runs.append(run(records, info))
    return runs


def _ingest(url: str, runs: list[Run]) -> None:
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for run in runs:
            ingester.ingest(run)


def _detect(url: str):
    with psycopg.connect(url) as conn:
        return detect_and_alert(conn, REPOSITORY, Thresholds())


def test_a_repository_with_no_stored_history_is_an_empty_pass(store_url):
    with psycopg.connect(store_url) as conn:
        report = detect_and_alert(conn, "never-measured", Thresholds())
    assert report == PassReport(series=0, too_short=0, change_points=0, opened=(), closed=())


@pytest.fixture
def regressions_cli(store_url, kernelwatch_cli, monkeypatch):
    """``kernelwatch regressions ...`` against the test's database."""
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    return lambda *args: kernelwatch_cli("regressions", *args)


def test_one_culprit_across_20_series_is_one_alert_and_recovery_closes_it(
    store_url, regressions_cli
):
    cli = regressions_cli
    _ingest(store_url, _history([1.0] * 20 + [1.08] * 15))
    first = _detect(store_url)
    assert first.series == 20 and len(first.opened) == 1, first
    assert _detect(store_url).opened == ()  # a second pass finds nothing new

    listed = cli("list", "--json")
    assert listed.returncode == 0, listed.stderr
    (alert,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert alert["state"] == "untriaged" and alert["change_points"] == 20
    # The culprit is commit 20; the range may be a point or two wide either side.
    good, bad = int(alert["good_sha"], 16), int(alert["bad_sha"], 16)
    assert good < 20 <= bad and bad - good <= 6, (good, bad)

    acked = cli(
        "ack", str(alert["regression_id"]), "--note", "looking", "--assignee", "ana", "--by", "ana"
    )
    assert acked.returncode == 0 and "untriaged -> acknowledged" in acked.stdout
    again = cli("ack", str(alert["regression_id"]))
    assert again.returncode == 2 and "cannot move an alert from acknowledged" in again.stderr
    shown = json.loads(cli("show", str(alert["regression_id"]), "--json").stdout)
    assert shown["assignee"] == "ana" and len(shown["change_point_list"]) == 20
    assert [e["state"] for e in shown["events"]] == ["untriaged", "acknowledged"]

    # The fix lands: every series goes back to its old level, and the alert closes itself.
    _ingest(store_url, _history([1.0] * 15, seed=1, offset=35))
    closing = _detect(store_url)
    assert closing.closed == (alert["regression_id"],), closing
    shown = json.loads(cli("show", str(alert["regression_id"]), "--json").stdout)
    assert shown["state"] == "fixed" and shown["open"] is False
    closed_by = shown["events"][-1]
    assert closed_by["actor"] == "kernelwatch"
    assert closed_by["note"].startswith("auto: series recovered at point"), closed_by


def test_regressions_update_judges_by_the_files_thresholds(
    store_url, regressions_cli, tmp_path, monkeypatch
):
    _ingest(store_url, _history([1.0] * 20 + [1.08] * 15, series=3))
    config = tmp_path / "kernelwatch.toml"
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))

    def update(text: str) -> str:
        config.write_text(text)
        result = regressions_cli("update", "--repository", REPOSITORY)
        assert result.returncode == 0, result.stderr
        return result.stdout.splitlines()[0]

    # An 8% step under a 50% floor: nothing to report, from the defaults or the kernel's own.
    assert "0 new change point(s), 0 regression(s) opened" in update(
        "[detection]\nmin_magnitude = 0.5\n"
    )
    own = '[[thresholds]]\nkernels = ["rms_*"]\ndetection.min_magnitude = 0.5\n'
    assert "0 new change point(s), 0 regression(s) opened" in update(own)
    other = '[[thresholds]]\nkernels = ["softmax"]\ndetection.min_magnitude = 0.5\n'
    assert "3 new change point(s), 1 regression(s) opened" in update(other)


def test_reset_baseline_closes_and_silences(store_url, regressions_cli):
    cli = regressions_cli
    _ingest(store_url, _history([1.0] * 20 + [1.10] * 15, series=4))
    (regression_id,) = _detect(store_url).opened
    reset = cli(
        "reset-baseline",
        "--repository",
        REPOSITORY,
        "--commit",
        f"{20:040x}",
        "--note",
        "bigger tiles on purpose",
    )
    assert reset.returncode == 0, reset.stderr
    assert f"#{regression_id}: untriaged -> wont_fix" in reset.stdout
    assert _detect(store_url).opened == ()  # history before the reset no longer alerts
    with psycopg.connect(store_url) as conn:
        kinds = conn.execute("SELECT kind FROM annotations").fetchall()
    assert ("baseline_reset",) in kinds


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("show", "999"), "no regression #999"),
        (("resolve", "1", "--as", "done"), "not a closing state"),
        (("list", "--state", "sleeping"), "unknown state 'sleeping'"),
        (
            ("reset-baseline", "--repository", REPOSITORY, "--commit", "abc", "--note", "x"),
            "commit 'abc'",
        ),
    ],
)
def test_bad_triage_input_exits_2_with_one_line(regressions_cli, args, message):
    result = regressions_cli(*args)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_drift_is_one_regression_named_a_drift_and_closed_the_night_it_stops(store_url):
    """Issue 47: three series drift +0.5 % a night from night 20. The pass while they still
    drift opens one regression named a drift (not a staircase of steps) and stores each
    series' drift open; the pass after it stopped closes each at the night it stopped."""
    drifting = [1.0] * 20 + [1.005**k for k in range(1, 21)]
    _ingest(store_url, _history(drifting, series=3))
    first = _detect(store_url)
    assert len(first.opened) == 1 and first.change_points == 3, first
    _ingest(store_url, _history([1.005**20] * 15, series=3, offset=len(drifting)))
    second = _detect(store_url)
    assert second.opened == () and second.change_points == 0, second
    with psycopg.connect(store_url) as conn:
        (title,) = conn.execute("SELECT title FROM regressions").fetchone()
        rows = conn.execute(
            "SELECT kind, drift_slope, drift_open, commit_sha, drift_end_sha, summary "
            "FROM report_change_points ORDER BY series_key"
        ).fetchall()
    assert "drifting +0.5" in title and "%/night" in title and "in all" in title, title
    assert len(rows) == 3
    for kind, slope, still, began, ended, summary in rows:
        assert kind == "drift" and abs(slope - 0.005) <= 0.002 and still is False, rows
        assert abs(int(began, 16) - 20) <= 3 and abs(int(ended, 16) - 40) <= 3, rows
        assert summary.startswith("drifting +0.5") and f"until {ended[:12]}" in summary
