"""Issue 49: the A/B rule's false-alarm rate, measured on free A/A pairs (two consecutive
nightly measurements of a series with the same build identity on one pool). The pure rule
on hand-made points, then a seeded store with two pools, one quiet and one whose identical
builds the rule calls different: the detection pass judges each series' newest pair, stores
the pairs and the rates, and the fleet-health panel's SQL, as the reader role, gives the
hand-computed rates with the noisy pool flagged."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import psycopg
from factories import DEVICE, REPOSITORY, commit, measurement, run, run_info
from pg_roles import as_role

from kernelwatch.analysis.aa_rate import AAJudged, aa_pair, aa_rates
from kernelwatch.analysis.thresholds import Thresholds, VerdictConfig
from kernelwatch.dashboards import health
from kernelwatch.flows.commit_run import CommitOutcome
from kernelwatch.flows.detection import detect_and_alert
from kernelwatch.flows.nightly import NightlySummary
from kernelwatch.harness.records import CaseId
from kernelwatch.store.ingest import Ingester

START = datetime(2026, 6, 1, tzinfo=UTC)
RULE = VerdictConfig()


@dataclasses.dataclass(frozen=True)
class Point:
    samples_ns: tuple[float, ...]
    build_identity: str | None = "same"
    pool: str | None = "gpu-h100"
    status: str = "ok"
    throttled: tuple[bool, ...] = ()
    sm_clock_mhz: tuple[float, ...] = ()


def _samples(level: float, seed: int) -> tuple[float, ...]:
    rng = np.random.default_rng(seed)
    return tuple((1000.0 * level * np.exp(rng.normal(0.0, 0.004, 15))).tolist())


def test_only_two_measurements_of_one_build_on_one_pool_are_a_pair():
    same, slower = Point(_samples(1.0, 1)), Point(_samples(1.2, 2))
    assert aa_pair([Point(_samples(1.0, 3)), same], RULE).verdict == "SAME"
    assert aa_pair([Point(_samples(1.0, 3)), slower], RULE).verdict == "SLOWER"
    for other in (
        dataclasses.replace(slower, build_identity="changed"),
        dataclasses.replace(slower, build_identity=None),
        dataclasses.replace(slower, pool="gpu-b200"),
        dataclasses.replace(slower, status="error"),
    ):
        assert aa_pair([Point(_samples(1.0, 3)), other], RULE) is None, other
    unknown = dataclasses.replace(same, build_identity=None)
    assert aa_pair([unknown, unknown], RULE) is None
    assert aa_pair([same], RULE) is None


def test_the_rate_per_pool_and_model_and_the_flag_are_the_hand_computed_ones():
    judged = [AAJudged("quiet", "H200", "SAME")] * 40 + [AAJudged("quiet", "H200", "FASTER")]
    judged += [AAJudged("noisy", "H100", "SLOWER")] * 3 + [AAJudged("noisy", "H100", "SAME")] * 7
    judged += [AAJudged("noisy", "B200", "AMBIGUOUS")] * 10
    rates = {(r.pool, r.device_model): r for r in aa_rates(judged, stated=1e-3)}
    assert set(rates) == {("noisy", ""), ("noisy", "B200"), ("noisy", "H100"), ("quiet", ""),
                          ("quiet", "H200")}  # fmt: skip
    # One false alarm in 41 pairs is 2.4%, but at the stated 0.1% one in 41 happens 4% of
    # the time: not flagged. Three in ten would happen about once in 10^7: flagged.
    quiet = rates[("quiet", "H200")]
    assert (quiet.pairs, quiet.different, quiet.flagged) == (41, 1, False)
    assert abs(quiet.rate - 1 / 41) < 1e-12 and 0.03 < quiet.p_value < 0.05
    noisy = rates[("noisy", "H100")]
    assert (noisy.pairs, noisy.different, noisy.rate, noisy.flagged) == (10, 3, 0.3, True)
    pool = rates[("noisy", "")]
    assert (pool.pairs, pool.different, pool.rate, pool.flagged) == (20, 3, 0.15, True)
    assert rates[("noisy", "B200")].different == 0  # AMBIGUOUS is no false alarm


H100 = dataclasses.replace(DEVICE, name="NVIDIA H100 80GB HBM3", uuid="GPU-h100")
H200 = dataclasses.replace(DEVICE, name="NVIDIA H200", uuid="GPU-h200")


def _nights(pool: str, device, planted: set[int], series: int, offset: int) -> list:
    """Two nightly runs on ``pool``'s ``device`` of ``series`` cases, each case the same
    build both nights (a changed build for case 0 of the quiet pool), the cases in
    ``planted`` 20% slower the second night."""
    runs = []
    for night in range(2):
        when = START + timedelta(days=night, hours=offset)
        head = commit(f"{offset * 10 + night:040x}", when)
        info = run_info(when, run_id=str(uuid.uuid4()), commit=head, pool=pool, device=device)
        records = []
        for s in range(series):
            case = CaseId("builtin", "rms_norm", "llm", {"rows": 64 * (1 + s)}, "fp16")
            level = 1.2 if night == 1 and s in planted else 1.0
            identity = f"build-{s}" if not (pool == "quiet" and s == 0) else f"b{s}-{night}"
            records.append(
                dataclasses.replace(
                    measurement(case, _samples(level, 100 * offset + 10 * s + night)),
                    device=device,
                    build_identity=identity,
                )
            )
        runs.append(run(records, info))
    return runs


def test_a_pass_stores_the_pairs_and_the_panel_shows_the_rates_with_the_noisy_pool_flagged(
    store_url,
):
    runs = _nights("quiet", H200, {0}, 21, 0) + _nights("noisy", H100, {1, 2, 3, 4, 5, 6}, 20, 1)
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        for r in runs:
            ingester.ingest(r)
        report = detect_and_alert(conn, REPOSITORY, Thresholds())
        pairs = conn.execute(
            "SELECT pool, verdict, count(*) FROM aa_pairs GROUP BY 1, 2"
        ).fetchall()
    # The quiet pool's case 0 changed its build (and is 20% slower): no pair.
    counts = {(pool, verdict): n for pool, verdict, n in pairs}
    assert counts.get(("noisy", "SLOWER")) == 6 and counts.get(("quiet", "SLOWER")) is None, pairs
    assert sum(n for (pool, _), n in counts.items() if pool == "quiet") == 20, pairs
    summary = {(r.pool, r.device_model): (r.pairs, r.different, r.flagged) for r in report.aa}
    assert summary == {
        ("noisy", ""): (20, 6, True),
        ("noisy", H100.name): (20, 6, True),
        ("quiet", ""): (20, 0, False),
        ("quiet", H200.name): (20, 0, False),
    }, summary
    (panel,) = [p for p in health.dashboard().build().panels if "A/A" in (p.title or "")]
    sql = panel.targets[0].raw_sql
    with psycopg.connect(as_role(store_url, "kernelwatch_reader")) as conn:
        shown = conn.execute(sql).fetchall()
    assert [(r[1], r[2], r[3], r[4], r[8]) for r in shown] == [
        ("noisy", "(whole pool)", 20, 6, True),
        ("noisy", H100.name, 20, 6, True),
        ("quiet", "(whole pool)", 20, 0, False),
        ("quiet", H200.name, 20, 0, False),
    ], shown
    assert all(abs(r[6] - Thresholds().verdict.alpha) < 1e-15 for r in shown)
    # The nightly's summary says it on the flow run's page.
    lines = NightlySummary(REPOSITORY, "noisy", CommitOutcome("f" * 40, "ok"), 0, (), (),
                           aa=report.aa).markdown()  # fmt: skip
    assert (
        f"- A/A false alarms on noisy / {H100.name}: 6 of 20 identical builds called different "
        "(30.00%; stated 0.10%) **flagged: above the rule's stated rate**"
    ) in lines, lines
    assert "- A/A false alarms on quiet: 0 of 20 identical builds called different" in lines
