"""A bisection's steps and culprit written to the real PostgreSQL store."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime

import psycopg
import pytest
from synthetic_fleet import METHOD, Fleet, fleet_runs

from kernelwatch.analysis.bisect_search import BisectOutcome, Probe, bisect
from kernelwatch.analysis.verdict import ABVerdict
from kernelwatch.harness.records import CommitInfo
from kernelwatch.store.bisect_steps import record_bisection
from kernelwatch.store.findings import NewRegression, open_regression
from kernelwatch.store.identity import series_key
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.triage_state import TriageNotFound, show_regression

NOW = datetime(2026, 1, 10, tzinfo=UTC)


def _verdict(name: str, ratio: float) -> ABVerdict:
    return ABVerdict(name, ratio, ratio * 0.98, ratio * 1.02, 1e-6, 40, 40, None, None, "x")


@pytest.fixture
def stored(store_url):
    """One ingested nightly run (two series) at the good commit, and a regression on it."""
    fleet = Fleet(models=1, series=2, days=1, samples=7, pr_runs_per_day=0)
    run = next(fleet_runs(fleet, NOW))
    conn = psycopg.connect(store_url)
    Ingester(conn).ingest(run)
    with conn.transaction(), conn.cursor() as cur:
        repository_id = cur.execute("SELECT id FROM repositories").fetchone()[0]
        regression_id = open_regression(
            cur, repository_id, NewRegression("gemm slower", "code", 1.0, None, None, ()), "test"
        )
    cases = {m.case.kernel: m.case for m in run.records}
    series = {
        name: series_key(run.info.repository, case, run.info.device.name, METHOD)
        for name, case in cases.items()
    }
    yield conn, run, regression_id, series
    conn.close()


def _history(good: str, n: int = 8) -> tuple[list[str], dict[str, CommitInfo]]:
    """The good commit (stored) and ``n`` later commits the store has never seen."""
    shas = [good] + [f"{i:x}" * 40 for i in range(1, n + 1)]
    infos = {
        sha: CommitInfo(sha, (parent,), NOW.isoformat(), f"change {i}", "main")
        for i, (parent, sha) in enumerate(itertools.pairwise(shas), 1)
    }
    return shas, infos


def _probe(shas: list[str], culprit: int, crash_at: int | None = None):
    def probe(commit: str, round_: int) -> Probe:
        at = shas.index(commit)
        if at == crash_at:
            return Probe(
                {}, 2.0, {"rms_norm": "died of signal SIGSEGV", "fused_add_rms_norm": "skipped"}
            )
        gemm = _verdict("SLOWER", 2.0) if at >= culprit else _verdict("SAME", 1.0)
        return Probe({"rms_norm": gemm, "fused_add_rms_norm": _verdict("SAME", 1.0)}, 4.0)

    return probe


def _record(conn, outcome: BisectOutcome, run, regression_id, series, infos, bisect_id=None):
    record_bisection(
        conn,
        outcome,
        bisect_id=bisect_id or uuid.uuid4(),
        repository=run.info.repository,
        regression_id=regression_id,
        device=run.info.device,
        series=series,
        commits=infos,
    )


def test_steps_and_culprit_are_stored(stored):
    conn, run, regression_id, series = stored
    shas, infos = _history(run.info.commit.sha)
    outcome = bisect(shas, _probe(shas, culprit=5, crash_at=6), budget_s=100)
    assert outcome.status == "found" and outcome.culprit == shas[5]
    bisect_id = uuid.uuid4()
    _record(conn, outcome, run, regression_id, series, infos, bisect_id)

    rows = conn.execute(
        """SELECT b.step, c.sha, b.verdict, b.ratio, b.samples, b.gpu_seconds, s.key, b.note,
            g.sha, b.device_id IS NOT NULL
        FROM bisect_steps b JOIN commits c ON c.id = b.probe_commit_id
            JOIN commits g ON g.id = b.good_commit_id LEFT JOIN series s ON s.id = b.series_id
        WHERE b.bisect_id = %s ORDER BY b.step, s.key""",
        (bisect_id,),
    ).fetchall()
    assert len(rows) == 2 * len(outcome.steps)
    assert {r[8] for r in rows} == {shas[0]} and all(r[9] for r in rows)
    assert conn.execute("SELECT count(*) FROM devices").fetchone()[0] == 1  # the run's device
    assert {r[6] for r in rows} == set(series.values())
    assert sum(r[5] for r in rows) == pytest.approx(outcome.gpu_seconds)
    crash = [r for r in rows if r[1] == shas[6]]
    assert [r[2] for r in crash] == ["ERROR", "ERROR"] and crash[0][4] == 0
    assert any("judged skip; died of signal SIGSEGV" in r[7] for r in crash)
    gemm_at_culprit = next(r for r in rows if r[1] == shas[5] and r[6] == series["rms_norm"])
    assert gemm_at_culprit[2:5] == ("SLOWER", 2.0, 80)

    detail = show_regression(conn, regression_id)
    assert detail["culprit_sha"] == shas[5]
    event = detail["events"][-1]
    assert event["actor"] == "bisect" and event["state"] == "untriaged"
    assert event["note"].startswith(f"culprit {shas[5][:12]}: rms_norm 2.000x the good commit")
    stored_commit = conn.execute(
        "SELECT message, parents FROM commits WHERE sha = %s", (shas[5],)
    ).fetchone()
    assert stored_commit == ("change 5", [shas[4]])

    _record(conn, outcome, run, regression_id, series, infos, bisect_id)  # again: no-op
    assert conn.execute("SELECT count(*) FROM bisect_steps").fetchone()[0] == len(rows)
    assert len(show_regression(conn, regression_id)["events"]) == 2


def test_an_outcome_without_culprit_leaves_the_culprit_and_says_why(stored):
    conn, run, regression_id, series = stored
    shas, infos = _history(run.info.commit.sha)
    outcome = bisect(shas, _probe(shas, culprit=5), budget_s=10)
    assert outcome.status == "budget_exhausted"
    _record(conn, outcome, run, regression_id, series, infos)
    detail = show_regression(conn, regression_id)
    assert detail["culprit_sha"] is None
    assert detail["events"][-1]["note"].startswith("bisect budget_exhausted: ")
    assert conn.execute("SELECT count(*) FROM bisect_steps").fetchone()[0] == 2 * 2


def test_without_a_regression_only_the_steps_are_written(stored):
    conn, run, _, series = stored
    shas, infos = _history(run.info.commit.sha, n=3)
    outcome = bisect(shas, _probe(shas, culprit=2), budget_s=100)
    _record(conn, outcome, run, None, series, infos)
    count = "SELECT count(*) FROM bisect_steps WHERE regression_id IS NULL"
    assert conn.execute(count).fetchone()[0] == 2 * len(outcome.steps)
    assert conn.execute("SELECT count(*) FROM regression_events").fetchone()[0] == 1


def test_bad_input_writes_nothing(stored):
    conn, run, regression_id, series = stored
    shas, infos = _history(run.info.commit.sha, n=3)
    outcome = bisect(shas, _probe(shas, culprit=2), budget_s=100)
    with pytest.raises(ValueError, match="no series key given for case fused_add_rms_norm"):
        _record(conn, outcome, run, regression_id, {"rms_norm": series["rms_norm"]}, infos)
    with pytest.raises(ValueError, match=f"{shas[3]} is neither stored nor described"):
        _record(conn, outcome, run, regression_id, series, {shas[1]: infos[shas[1]]})
    with pytest.raises(TriageNotFound, match="no regression #999"):
        _record(conn, outcome, run, 999, series, infos)
    assert conn.execute("SELECT count(*) FROM bisect_steps").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM commits").fetchone()[0] == 1
