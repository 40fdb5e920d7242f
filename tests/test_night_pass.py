"""The nightly's same-night pass over a real PostgreSQL, from stored runs: a new register
spill opens a static regression the night it lands and reaches the triage board and the
alert rule; a confirmed slowdown is not opened a second time when the change-point net finds
it later; the budget leaves suspects unconfirmed and says so; a slow drift is still found by
the change-point net. The A/B is the one callback: here it returns interleaved records of
the stored series' cases, as the runner does."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from factories import DEVICE, METHOD, SOFTWARE, build, commit, correctness, measurement, run
from factories import run_info as make_info
from psycopg.rows import dict_row

from kernelwatch.analysis.thresholds import ConfirmBudget, Thresholds
from kernelwatch.dashboards.alert_rules import rules
from kernelwatch.flows.commit_run import CommitOutcome
from kernelwatch.flows.confirmation import night_pass
from kernelwatch.flows.detection import detect_and_alert
from kernelwatch.flows.nightly import NightlySummary
from kernelwatch.harness.records import ABMeasurement, CaseId
from kernelwatch.store.ingest import Ingester

START = datetime(2026, 6, 1, tzinfo=UTC)
CASES = [
    CaseId("builtin", "rms_norm", "llm", {"rows": 64 * (1 + s), "hidden": 4096}, "fp16")
    for s in range(3)
]


def _night(i: int, level: float | list[float], records=(), seed: int = 0):
    """Night ``i``'s nightly run: each case at ``level`` (one per case, or one for all)
    times its base time, 15 samples of 0.4% noise, plus ``records``."""
    rng = np.random.default_rng(seed * 1000 + i)
    levels = level if isinstance(level, list) else [level] * len(CASES)
    when = START + timedelta(days=i)
    info = make_info(
        when,
        run_id=str(uuid.UUID(int=seed * 1000 + i + 1)),
        commit=commit(f"{i:040x}", when, parents=(f"{i - 1:040x}",)),
    )
    timed = [
        measurement(
            c, 1000.0 * (1 + s / 10) * lv * np.exp(rng.normal(0.0, 0.004, 15)), duration_s=5.0
        )
        for s, (c, lv) in enumerate(zip(CASES, levels, strict=True))
    ]
    return run([*timed, *records], info)


def _ingest(url: str, runs) -> None:
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for r in runs:
            ingester.ingest(r)


def _ab(ratio: float, calls: list):
    """The A/B callback: each asked kernel's cases timed interleaved, B ``ratio`` times A."""

    def measure(base: str, kernels: tuple[str, ...], round_: int) -> list[ABMeasurement]:
        calls.append((base, kernels, round_))
        rng = np.random.default_rng(len(calls))
        pairs = []
        for s, case in enumerate(CASES):
            a = 1000.0 * (1 + s / 10) * np.exp(rng.normal(0.0, 0.004, 30))
            b = ratio * 1000.0 * (1 + s / 10) * np.exp(rng.normal(0.0, 0.004, 30))
            sides = {"base": measurement(case, a), "head": measurement(case, b)}
            pairs.append(
                ABMeasurement(case, "ok", "", METHOD, DEVICE, SOFTWARE, **sides, duration_s=1.0)
            )
        return [p for p in pairs if p.case.kernel in kernels]

    return measure


def _never(*args):
    raise AssertionError("no A/B was expected")


DEFAULT_BUDGET = ConfirmBudget()


def _pass(url: str, night: int, budget: ConfirmBudget = DEFAULT_BUDGET, measure=_never):
    with psycopg.connect(url) as conn:
        return night_pass(conn, str(uuid.UUID(int=night + 1)), Thresholds(), budget, measure)


def test_a_new_register_spill_opens_a_static_regression_that_night(store_url):
    clean = build()
    spilling = build(spill_store_bytes=64, spill_load_bytes=64)
    checks = [correctness(c) for c in CASES]
    _ingest(store_url, [_night(0, 1.0, [clean, *checks]), _night(1, 1.0, [spilling, *checks])])
    report = _pass(store_url, 1)
    ((regression_id, kind),) = report.opened
    assert kind == "static"
    (line,) = report.suspects
    assert line.kind == "static" and line.regression_id == regression_id
    with psycopg.connect(store_url) as conn:
        conn.execute("SET ROLE kernelwatch_reader")  # what Grafana sees
        title, kernels, opened_by, good, bad = conn.execute(
            "SELECT title, kernels, opened_by, good_sha, bad_sha FROM report_triage_board "
            "WHERE regression_id = %s",
            (regression_id,),
        ).fetchone()
        (new,) = [rule for rule in rules() if rule.uid == "kw-regression-open"]
        with conn.cursor(row_factory=dict_row) as cur:
            firing = [r for r in cur.execute(new.sql) if r["regression_id"] == str(regression_id)]
    assert title.startswith("rms_norm: starts spilling") and kernels == "rms_norm"
    assert (opened_by, good, bad) == ("confirmation", f"{0:040x}", f"{1:040x}")
    assert [(r["kind"], r["kernels"]) for r in firing] == [("static", "rms_norm")]


def test_a_confirmed_slowdown_is_not_opened_again_when_the_change_point_settles(store_url):
    _ingest(store_url, [_night(i, 1.0) for i in range(20)])
    assert _pass(store_url, 19).suspects == ()
    _ingest(store_url, [_night(20, 1.5)])
    calls: list = []
    report = _pass(store_url, 20, measure=_ab(1.5, calls))
    # One A/B: the night before against tonight.
    assert calls == [(f"{19:040x}", ("rms_norm",), 0)]
    ((_, kind),) = report.opened
    assert kind == "timing" and [s.outcome for s in report.suspects] == ["regression"] * 3
    # The nights after: no suspicion (the regime starts at the change), and once the
    # change-point net can see the step it finds the same change: nothing new is opened.
    for night in range(21, 36):
        _ingest(store_url, [_night(night, 1.5)])
        assert _pass(store_url, night).suspects == ()
    with psycopg.connect(store_url) as conn:
        net = detect_and_alert(conn, "kernels-repo", Thresholds())
        count = conn.execute("SELECT count(*) FROM regressions").fetchone()[0]
    assert net.series == 3 and net.opened == () and count == 1


def test_the_budget_leaves_suspects_unconfirmed_and_the_summary_lists_them(store_url):
    _ingest(store_url, [_night(i, 1.0) for i in range(6)])
    _ingest(store_url, [_night(6, [3.0, 1.5, 1.2])])
    report = _pass(store_url, 6, ConfirmBudget(max_suspects=0))
    assert sorted(s.outcome for s in report.suspects) == ["unconfirmed"] * 3
    assert report.opened == ()
    summary = NightlySummary("kernels-repo", "local", CommitOutcome("f" * 40, "ok"), 0, (), (),
                             night=report)  # fmt: skip
    lines = summary.markdown()
    assert "3 suspects (3 unconfirmed)" in lines
    assert lines.count("  - unconfirmed: timing rms_norm") == 3


def test_over_the_seconds_budget_a_suspect_waits_and_is_suspected_again_the_next_night(
    store_url,
):
    _ingest(store_url, [_night(i, 1.0) for i in range(6)] + [_night(6, 2.0)])
    # Tonight's timing took 5 s a case: the A/B of the three cases is expected to take 30 s.
    first = _pass(store_url, 6, ConfirmBudget(budget_s=20.0))
    assert {s.outcome for s in first.suspects} == {"unconfirmed"}
    assert "budget" in first.suspects[0].note
    _ingest(store_url, [_night(7, 2.0)])
    calls: list = []
    second = _pass(store_url, 7, measure=_ab(2.0, calls))
    # Suspected from its first night: the A/B compares night 5 (before it) against tonight.
    assert calls == [(f"{5:040x}", ("rms_norm",), 0)]
    assert [kind for _, kind in second.opened] == ["timing"]


def test_a_slow_drift_is_still_found_by_the_change_point_net(store_url):
    # 0.5% a night over 20 nights after 30 flat ones: no night moves far from the one before,
    # but the history net sees the level leave.
    levels = [1.0] * 30 + [1.005**k for k in range(1, 21)]
    _ingest(store_url, [_night(i, lv) for i, lv in enumerate(levels)])
    with psycopg.connect(store_url) as conn:
        net = detect_and_alert(conn, "kernels-repo", Thresholds())
    assert len(net.opened) == 1 and net.change_points == 3
