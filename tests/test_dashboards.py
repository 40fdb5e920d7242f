"""Every panel, annotation, variable and alert-rule query of the generated dashboards, run
the way Grafana would run it (macros and template variables expanded by
``kernelwatch.dashboards.macros``) as the read-only role the data source logs in as, against
a real PostgreSQL holding seeded history: 36 nightly commits on three GPU models, with a
planted 10% regression of flash_attention fp16/bf16 on B200 (detected by the real detection
pass and bisected), a build that lost its tcgen05 path, a throttling GPU, a failed run, a
GPU model whose nightly stopped, and a case whose measurement method changed."""

from __future__ import annotations

import dataclasses
import importlib
import json
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlparse

import numpy as np
import psycopg
import pytest
import views_before
from pg_roles import as_role, set_passwords
from serving_files import METADATA, requests, vllm_result
from synthetic_fleet import (
    BASELINE,
    COMM_PEAK_GBPS,
    COMM_SIZES,
    COMM_WORLDS,
    METHOD,
    MODELS,
    REPOSITORY,
    SUITE,
    Fleet,
    add_regressions,
    cases,
    comm_runs,
    devices,
    make_run,
)

from kernelwatch.analysis.bisect_search import BisectOutcome, Step
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.verdict import ABVerdict
from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards import catalog, inventory
from kernelwatch.dashboards.fleet import MORNING_ROWS, TOO_SHORT
from kernelwatch.dashboards.limits import NIGHTLY_MISSING_HOURS
from kernelwatch.dashboards.macros import Request, expand, expand_link
from kernelwatch.dashboards.triage_board import STATES
from kernelwatch.flows.detection import detect_and_alert
from kernelwatch.flows.reporting import report_url
from kernelwatch.harness.build.sass import TENSOR_CORE_RANK
from kernelwatch.harness.records import (
    BuildMetrics,
    CommitInfo,
    LaunchConfig,
    Measurement,
    Method,
    StageTime,
)
from kernelwatch.report.compare import comparison_from_runs, pr_findings
from kernelwatch.report.markdown import merge_verdict
from kernelwatch.serving.formats import Given, read_text
from kernelwatch.serving.judge import changes, findings
from kernelwatch.serving.results import JUDGED
from kernelwatch.store import serving
from kernelwatch.store.bisect_steps import record_bisection
from kernelwatch.store.device_time import add_stage
from kernelwatch.store.findings import (
    NewChangePoint,
    NewRegression,
    insert_change_points,
    open_regression,
)
from kernelwatch.store.identity import series_key
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.night_stats import POINTS_CAP
from kernelwatch.store.pr_findings import PrCheck, insert_pr_check
from kernelwatch.store.runfile import Run
from kernelwatch.store.suspects import SuspectRow, commit_id, insert_suspects

ROOT = Path(__file__).parent.parent
END = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
DAYS = 36
PLANT_DAY = 24
SLOWDOWN = 1.10
H100, H200, B200 = 0, 1, 2
#: H100's nightly stops this many days before the end: its data goes missing.
H100_STOPS = 3
FAILED_DAY = 34
METHOD_CHANGE_DAY = 30
NEW_METHOD = Method("cuda-graph", "cold", 1)
NUMERIC = {"int2", "int4", "int8", "float4", "float8", "numeric"}
TIME = {"timestamptz", "timestamp"}
TEXT = {"text", "varchar", "name"}


def sha(day: int) -> str:
    return f"{day + 1:040x}"


def _build(arch: str, dtype: str, day: int) -> BuildMetrics:
    """flash_attention's build: from PLANT_DAY sm_100a lost tcgen05 and spills."""
    lost = arch == "sm_100a" and day >= PLANT_DAY
    path = {"sm_90a": "HGMMA", "sm_100a": "tcgen05"}[arch]
    return BuildMetrics(
        SUITE, "flash_attention", "attn_fwd", "triton", arch, LaunchConfig({"BM": 128}, 8, 3),
        "ok", registers=255 if lost else 168, spill_store_bytes=1024 if lost else 0,
        spill_load_bytes=1024 if lost else 0, tensor_core="HMMA" if lost else path,
        opcodes={}, toolchain={"ptxas": "12.9"}, dtype=dtype, workload="llm", case="tokens=1",
    )  # fmt: skip


def _slowed(record):
    sol = dataclasses.replace(record.sol, pct_sol=record.sol.pct_sol / SLOWDOWN)
    return dataclasses.replace(record, speedup=record.speedup / SLOWDOWN, sol=sol)


def _history() -> list[Run]:
    rng = np.random.default_rng(7)
    fleet = Fleet(models=3, series=21, days=DAYS, samples=7, pr_runs_per_day=0)
    fleet_cases = cases(fleet.series)
    planted = [
        i for i, c in enumerate(fleet_cases) if c.kernel == "flash_attention" and c.dtype != "fp32"
    ]
    base = {m: rng.uniform(5e3, 5e6, size=len(fleet_cases)) for m in range(3)}
    noisy = devices(H200)[3]
    runs = []
    for day in range(DAYS):
        at = END - timedelta(days=DAYS - day)
        commit = CommitInfo(sha(day), (sha(day - 1),), at.isoformat(), f"change {day}", "main")
        for m in range(3):
            if m == H100 and day >= DAYS - H100_STOPS:
                continue
            level = base[m].copy()
            if m == B200 and day >= PLANT_DAY:
                level[planted] *= SLOWDOWN
            device = devices(m)[day % 4]
            run = make_run(fleet, rng, device, fleet_cases, level, at + timedelta(hours=3),
                           "nightly", commit)  # fmt: skip
            records = list(run.records)
            if device == noisy:
                records = [dataclasses.replace(r, throttled=(True, False, False) * 2 + (False,))
                           for r in records]  # fmt: skip
            if m == B200 and day >= PLANT_DAY:
                # the planted slowdown costs its share of speedup over the library and of %SOL
                records = [_slowed(r) if i in planted else r for i, r in enumerate(records)]
            if m == H200 and day >= METHOD_CHANGE_DAY:
                records[0] = dataclasses.replace(records[0], method=NEW_METHOD)
            # Each case's build identity: the planted slowdown is a new build, the rest the
            # same build every night (A/A pairs for the false-alarm panel).
            records = [
                dataclasses.replace(r, build_identity=f"{r.case.key()}-" + (
                    "slow" if m == B200 and day >= PLANT_DAY and i in planted else "base"))
                if isinstance(r, Measurement) else r
                for i, r in enumerate(records)
            ]  # fmt: skip
            if m == B200:
                records += [_build(arch, dtype, day) for arch in ("sm_90a", "sm_100a")
                            for dtype in ("fp16", "bf16")]  # fmt: skip
            if m == H200 and day == FAILED_DAY:
                # the last run of all, within the "Run failed" rule's 24-hour window
                failed_at = (datetime.now(UTC) - timedelta(hours=2)).isoformat()
                info = dataclasses.replace(run.info, status="failed", started_at=failed_at)
                runs.append(Run(info, ()))
                continue
            runs.append(Run(run.info, tuple(records)))
    return runs


def _verdict(name: str, ratio: float) -> ABVerdict:
    return ABVerdict(name, ratio, ratio - 0.01, ratio + 0.01, 1e-6, 30, 30, None, None, "seeded")


def _bisect(conn: psycopg.Connection, regression_id: int, planted_key: str) -> None:
    """A bisection of the planted regression, as the bisect flow records it."""
    steps = tuple(
        Step(sha(day), 0, {"flash_attention fp16": _verdict(name, ratio)}, {}, 12.0, judgement)
        for day, name, ratio, judgement in (
            (22, "SAME", 1.0, "good"),
            (PLANT_DAY, "SLOWER", SLOWDOWN, "bad"),
            (PLANT_DAY - 1, "SAME", 1.0, "good"),
        )
    )
    outcome = BisectOutcome(
        "found", sha(20), sha(PLANT_DAY), (sha(PLANT_DAY), sha(PLANT_DAY)), steps, 36.0,
        ("flash_attention fp16",), "culprit found",
    )  # fmt: skip
    record_bisection(
        conn, outcome, bisect_id=uuid.uuid4(), repository=REPOSITORY,
        regression_id=regression_id, device=devices(B200)[0],
        series={"flash_attention fp16": planted_key}, commits={},
    )  # fmt: skip


def _checked_noise(conn: psycopg.Connection, planted_key: str) -> None:
    """The planted series' latest point, suspected by its nightly and found to be noise by
    the same night's A/B, as the same-night pass records it."""
    series_id, measurement_id, run_pk, repository_id, commit_id, kernel = conn.execute(
        """SELECT s.id, m.id, r.id, r.repository_id, r.commit_id, k.name
        FROM series s JOIN kernels k ON k.id = s.kernel_id
            JOIN measurements m ON m.series_id = s.id AND m.history
            JOIN runs r ON r.id = m.run_id
        WHERE s.key = %s ORDER BY m.measured_at DESC LIMIT 1""",
        (planted_key,),
    ).fetchone()
    row = SuspectRow(
        run_pk=run_pk, repository_id=repository_id, kind="timing", kernel=kernel,
        case_label="planted", dtype="fp16", head_commit_id=commit_id,
        base_commit_id=commit_id, series_id=series_id, measurement_id=measurement_id,
        severity=0.2, suspicion="+22.1% against the median of 30 nights (5.2 sigma)",
        verdict="SAME", ratio=1.001, ci_low=0.995, ci_high=1.006, p_value=0.6, samples=60,
        rounds=1, gpu_seconds=2.5, outcome="checked_noise",
    )  # fmt: skip
    # The same night, a correctness failure of another case (it needs no A/B).
    failure = dataclasses.replace(
        row, kind="correctness", case_label="tokens=7", series_id=None, measurement_id=None,
        severity=None, suspicion="max abs error 3.1e-2 > tolerance 1e-2", verdict=None,
        ratio=None, ci_low=None, ci_high=None, p_value=None, samples=0, rounds=0,
        gpu_seconds=0.0, outcome="unconfirmed",
    )  # fmt: skip
    with conn.transaction(), conn.cursor() as cur:
        insert_suspects(cur, conn.execute("SELECT suite FROM runs WHERE id = %s", (run_pk,))
                        .fetchone()[0], [row, failure])  # fmt: skip


#: The same-night A/B of the confirmed regression: measured over its own range, from the
#: regime's commit AB_BASE_DAY nights back to last night's head, not the previous nightly's.
AB_RATIO, AB_CI = 3.018, (2.561, 3.742)
AB_BASE_DAY = DAYS - 4


def _confirmed_overnight(conn: psycopg.Connection) -> int:
    """Last night on B200, rms_norm bf16 suspected and confirmed SLOWER by the same night's
    A/B, which opened a regression, as the same-night pass records it; its id."""
    (key,) = [series_key(REPOSITORY, c, MODELS[B200][0], METHOD) for c in cases(21)
              if (c.kernel, c.dtype) == ("rms_norm", "bf16")][:1]  # fmt: skip
    series_id, measurement_id, measured_at, run_pk, repository_id, head_id = conn.execute(
        """SELECT s.id, m.id, m.measured_at, r.id, r.repository_id, r.commit_id
        FROM series s JOIN measurements m ON m.series_id = s.id AND m.history
            JOIN runs r ON r.id = m.run_id
        WHERE s.key = %s ORDER BY m.measured_at DESC LIMIT 1""",
        (key,),
    ).fetchone()
    base_id = commit_id(conn, repository_id, sha(AB_BASE_DAY))
    with conn.transaction(), conn.cursor() as cur:
        (point,) = insert_change_points(cur, "confirmation", [NewChangePoint(
            series_id, measurement_id, head_id, measured_at, 1e4, 1e4 * AB_RATIO,
            AB_RATIO - 1, 1e-9, "regression")])  # fmt: skip
        regression_id = open_regression(cur, repository_id, NewRegression(
            "rms_norm: +201.8% on B200", "code", AB_RATIO - 1, base_id, head_id, (point,),
            opened_by="confirmation"), "seed")  # fmt: skip
        insert_suspects(cur, SUITE, [SuspectRow(
            run_pk=run_pk, repository_id=repository_id, kind="timing", kernel="rms_norm",
            case_label="confirmed", dtype="bf16", head_commit_id=head_id,
            base_commit_id=base_id, series_id=series_id, measurement_id=measurement_id,
            severity=1.1, suspicion="+201.8% against the median of 30 nights (40 sigma)",
            verdict="SLOWER", ratio=AB_RATIO, ci_low=AB_CI[0], ci_high=AB_CI[1],
            p_value=1e-9, samples=60, rounds=1, gpu_seconds=2.5, outcome="regression",
            regression_id=regression_id)])  # fmt: skip
    return regression_id


#: One of three commits merged on the last night, authored days before: the confirmed
#: regression's culprit, which no nightly measured on its own.
MERGED = CommitInfo("c" * 40, (sha(DAYS - 2),), (END - timedelta(days=4)).isoformat(),
                    "merged with two others", "main")  # fmt: skip


def _bisect_merged_culprit(conn: psycopg.Connection, regression_id: int) -> None:
    """The bisection of last night's confirmed regression, as the bisect flow records it:
    its culprit is a commit merged that night, not the night's head."""
    key = conn.execute(
        "SELECT s.key FROM change_points cp JOIN series s ON s.id = cp.series_id "
        "WHERE cp.regression_id = %s", (regression_id,)).fetchone()[0]  # fmt: skip
    step = Step(MERGED.sha, 0, {"rms_norm bf16": _verdict("SLOWER", AB_RATIO)}, {}, 12.0, "bad")
    outcome = BisectOutcome("found", sha(DAYS - 2), MERGED.sha, (MERGED.sha, MERGED.sha),
                            (step,), 12.0, ("rms_norm bf16",), "culprit found")  # fmt: skip
    record_bisection(
        conn, outcome, bisect_id=uuid.uuid4(), repository=REPOSITORY,
        regression_id=regression_id, device=devices(B200)[0],
        series={"rms_norm bf16": key}, commits={MERGED.sha: MERGED},
    )  # fmt: skip


def _static_overnight(conn: psycopg.Connection) -> int:
    """Last night on B200, flash_attention's sm_100a build lost its tcgen05 path: a static
    regression the same night opened, as the same-night pass records it; its id."""
    run_pk, repository_id, head_id, previous_id = conn.execute(
        """SELECT r.id, r.repository_id, r.commit_id, p.commit_id FROM runs r
            JOIN devices d ON d.id = r.device_id
            JOIN LATERAL (SELECT commit_id FROM runs q WHERE q.device_id IN (
                SELECT id FROM devices WHERE model = d.model) AND q.started_at < r.started_at
                ORDER BY q.started_at DESC LIMIT 1) p ON true
        WHERE d.model = %s AND r.trigger = 'nightly' ORDER BY r.started_at DESC LIMIT 1""",
        (MODELS[B200][0],),
    ).fetchone()
    with conn.transaction(), conn.cursor() as cur:
        regression_id = open_regression(cur, repository_id, NewRegression(
            "flash_attention: lost tcgen05 on sm_100a", "code", None, previous_id, head_id, (),
            kind="static", opened_by="confirmation"), "seed")  # fmt: skip
        insert_suspects(cur, SUITE, [SuspectRow(
            run_pk=run_pk, repository_id=repository_id, kind="static", kernel="flash_attention",
            case_label="attn_fwd sm_100a tokens=1", dtype="fp16", head_commit_id=head_id,
            base_commit_id=previous_id, suspicion="tensor_core on sm_100a: tcgen05 -> HMMA",
            outcome="regression", regression_id=regression_id)])  # fmt: skip
    return regression_id


#: The reports are served from REPORT_DIR at REPORT_BASE ([run] report_dir, report_url).
REPORT_DIR, REPORT_BASE = Path("/srv/kernelwatch/reports"), "https://reports.example/kw"
#: The pull request checked on B200 and H200 (its head slows flash_attention by 10%), and an
#: older one checked on B200 a day before, changing nothing.
PR, OLDER_PR = (42, "feature/fused-attn", "alice"), (41, "docs", "bob")
PR_HEAD, OLDER_HEAD = "f" * 40, "d" * 40


def _pr_check(conn: psycopg.Connection, ingester: Ingester, model: int, head_sha: str,
              pr: tuple[int, str, str], hours_ago: float) -> str:  # fmt: skip
    """A PR check on ``model``, compared and recorded as the PR flow does: its report is a
    file under the report folder; the head run's id."""
    rng = np.random.default_rng([11, model, int(head_sha[:8], 16)])
    fleet_cases = cases(21)
    fleet = Fleet(models=3, series=21, days=DAYS, samples=30, pr_runs_per_day=0)
    level = rng.uniform(5e3, 5e6, size=len(fleet_cases))
    slowdown = SLOWDOWN if head_sha == PR_HEAD else 1.0
    slowed = level * np.array([slowdown if c.kernel == "flash_attention" else 1.0
                               for c in fleet_cases])  # fmt: skip
    at = END - timedelta(hours=hours_ago)
    base_commit = CommitInfo(sha(DAYS - 1), (sha(DAYS - 2),), at.isoformat(), "change", "main")
    head_commit = CommitInfo(head_sha, (sha(DAYS - 1),), at.isoformat(), "pr", pr[1])
    device = devices(model)[0]
    base = make_run(fleet, rng, device, fleet_cases, level, at, "pr", base_commit)
    head = make_run(fleet, rng, device, fleet_cases, slowed, at + timedelta(minutes=30), "pr",
                    head_commit, sha(DAYS - 1))  # fmt: skip
    # and the PR's sm_100a build loses the tcgen05 path and spills: a static finding
    lost = PLANT_DAY if head_sha == PR_HEAD else 0
    base = Run(base.info, (*base.records, _build("sm_100a", "fp16", 0)))
    head = Run(head.info, (*head.records, _build("sm_100a", "fp16", lost)))
    for run in (base, head):
        ingester.ingest(run)
    comparison = comparison_from_runs(conn, base.info.run_id, head.info.run_id, Thresholds())
    report = REPORT_DIR / f"pr-{pr[0]}-{model}" / "compare.html"
    check = PrCheck(comparison.outcome, merge_verdict(comparison),
                    report_url(report, REPORT_DIR, REPORT_BASE), *pr)  # fmt: skip
    insert_pr_check(conn, head.info.run_id, base.info.run_id, check, pr_findings(comparison))
    return head.info.run_id


#: The seeded deployment: it serves each nightly's kernel commit a few hours after the
#: nightly measured it; its p99 TPOT steps by SERVING_STEP from the planted commit on.
DEPLOYMENT = "chat-8b"
SERVING_STEP = 1.06
P99_TPOT_MS, OUTPUT_TOKENS_PER_S = 20.0, 5000.0


def _serving(conn: psycopg.Connection) -> tuple[int, dict[str, float]]:
    """Ingest the deployment's history from vLLM result files, judge it; the serving
    regression opened and the last run's output throughput by kernel commit."""
    rng = np.random.default_rng(11)
    throughput = {}
    for day in range(DAYS):
        at = END - timedelta(days=DAYS - day) + timedelta(hours=5)
        step = SERVING_STEP if day >= PLANT_DAY else 1.0
        rate = OUTPUT_TOKENS_PER_S * rng.lognormal(0, 0.01)
        result = vllm_result(
            requests(n=12, tokens=6, seed=day),
            {**METADATA, "deployment": DEPLOYMENT, "kernel_commit": sha(day)},
            date=at.strftime("%Y%m%d-%H%M%S"),
            p99_tpot_ms=P99_TPOT_MS * step * rng.lognormal(0, 0.01),
            output_throughput=rate,
        )
        for run in read_text(json.dumps(result), "result.json", Given(), at.isoformat()):
            serving.ingest(conn, run)
        throughput[sha(day)] = rate
    ((deployment_id, _),) = serving.deployments(conn)
    found = [c for metric in JUDGED
             for c in changes(serving.history(conn, deployment_id, metric), metric)]  # fmt: skip
    recorded = serving.record(conn, deployment_id, found, findings(DEPLOYMENT, found), "test")
    (regression_id,) = recorded.opened
    return regression_id, throughput


@pytest.fixture(scope="module")
def seeded(pg_server):
    """One database with the seeded history, shared by this module's read-only tests."""
    name = "t_dashboards"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch')
    url = pg_server.url(name)
    planted_case = next(c for c in cases(21) if c.kernel == "flash_attention" and c.dtype == "fp16")
    planted_key = series_key(REPOSITORY, planted_case, MODELS[B200][0], METHOD)
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for run in _history():
            ingester.ingest(run)
        report = detect_and_alert(conn, REPOSITORY, Thresholds())
        regression_id = conn.execute(
            """SELECT DISTINCT cp.regression_id FROM change_points cp
            JOIN series s ON s.id = cp.series_id WHERE s.key = %s""",
            (planted_key,),
        ).fetchone()[0]
        _bisect(conn, regression_id, planted_key)
        _checked_noise(conn, planted_key)
        confirmed = _confirmed_overnight(conn)
        _bisect_merged_culprit(conn, confirmed)
        static = _static_overnight(conn)
        # Older regressions, some still untriaged, as earlier detection passes left them.
        add_regressions(conn, 20, seed=1, back=12)
        for run in comm_runs(END, 3):  # after the synthetic regressions, which pick series
            ingester.ingest(run)
        _pr_check(conn, ingester, B200, OLDER_HEAD, OLDER_PR, 30)
        pr_head = _pr_check(conn, ingester, B200, PR_HEAD, PR, 5)
        _pr_check(conn, ingester, H200, PR_HEAD, PR, 4)
        serving_regression, serving_throughput = _serving(conn)
        # Every run's device time, as the flows store it: the cost panels' rows.
        for (run_id,) in conn.execute("SELECT run_id::text FROM runs").fetchall():
            add_stage(conn, run_id, StageTime("bench", 600.0, 1))
        # One nightly point too wide to judge, as a nightly stores it (not the planted
        # series'): the history panel's grey point and the fleet's unjudged count.
        conn.execute(
            """UPDATE measurements SET unjudged = true WHERE id = (
                SELECT m.id FROM measurements m JOIN series s ON s.id = m.series_id
                WHERE m.history AND m.status = 'ok' AND s.key <> %s
                ORDER BY m.measured_at DESC, m.id LIMIT 1)""",
            (planted_key,),
        )
        quarter_keys = [k for (k,) in conn.execute(
            "SELECT s.key FROM series s JOIN kernels k ON k.id = s.kernel_id "
            "WHERE k.name = 'flash_attention' AND s.device_model = %s ORDER BY 1",
            (MODELS[B200][0],),
        )]  # fmt: skip
    reader = as_role(url, "kernelwatch_reader")
    return SimpleNamespace(
        url=url, reader=reader, report=report, regression_id=regression_id,
        planted_key=planted_key, pr_head=pr_head, quarter_keys=quarter_keys,
        confirmed=confirmed, static=static, serving_regression=serving_regression,
        serving_throughput=serving_throughput,
        request=Request(END - timedelta(days=60), datetime.now(UTC)),
    )  # fmt: skip


@pytest.fixture(scope="module")
def reader(seeded):
    """Runs SQL as kernelwatch_reader: (columns, type names, rows)."""
    with psycopg.connect(seeded.reader, autocommit=True) as conn:

        def run(sql: str):
            cur = conn.execute(sql)
            names = [d.name for d in cur.description]
            types = [conn.adapters.types.get(d.type_code).name for d in cur.description]
            return names, types, cur.fetchall()

        yield run


def _runner(reader):
    def run(sql: str):
        names, _types, rows = reader(sql)
        return names, rows

    return run


HISTORY_CHOICE = {"kernel": "flash_attention", "dtype": "fp16", "gpu": "NVIDIA B200"}


def _choices(seeded) -> dict[str, dict[str, object]]:
    history = {**HISTORY_CHOICE, "case": seeded.planted_key}
    return {
        "kw-history": history,
        "kw-builds": {"kernel": "flash_attention"},
        "kw-serving": {"deployment": DEPLOYMENT, "gpu_hour_price": "3.5"},
        "kw-quarter": {
            "kernel": ["flash_attention"],
            "gpu": [MODELS[B200][0]],
            "case": seeded.quarter_keys,
        },
    }


def _panel_rows(seeded, reader, dashboard_uid: str, title: str):
    """(columns, rows) of one panel's query as Grafana would run it."""
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == dashboard_uid]
    variables = inventory.resolve(
        dashboard, seeded.request, _runner(reader), _choices(seeded).get(dashboard_uid)
    )
    (query,) = [q for q in inventory.dashboard_queries(dashboard) if q.title == title]
    names, _types, rows = reader(expand(query.sql, seeded.request, variables))
    return [dict(zip(names, row, strict=True)) for row in rows]


def _referenced_fields(panel) -> set[str]:
    """Field names the panel's JSON refers to: overrides by name, matrix transformations."""
    fields = set()
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        if override["matcher"]["id"] == "byName":
            fields.add(override["matcher"]["options"])
    for transformation in panel.get("transformations") or []:
        if transformation["id"] == "groupingToMatrix":
            fields.update(transformation["options"][k] for k in ("rowField", "columnField",
                                                                 "valueField"))  # fmt: skip
    return fields


def _column_problems(query: inventory.Query, names, types) -> list[str]:
    """What is wrong with a result for the panel (or annotation) that draws it."""
    kinds = dict(zip(names, types, strict=True))
    numeric = [n for n, t in kinds.items() if t in NUMERIC]
    problems = []
    if query.format == "time_series" or query.panel_type in ("timeseries", "state-timeline"):
        if kinds.get("time") not in TIME:
            problems.append(f"no timestamp column 'time' in {kinds}")
        if not numeric:
            problems.append("no numeric column")
        problems += [f"{n} is {t}" for n, t in kinds.items()
                     if n != "time" and t not in NUMERIC | TEXT]  # fmt: skip
    elif query.panel_type in ("stat", "bargauge") and not numeric:
        problems.append("no numeric column to show")
    elif query.panel_type == "annotation":
        expected = {"time": TIME, "text": TEXT, "tags": TEXT}
        problems += [f"{n} should be one of {t}, is {kinds.get(n)}"
                     for n, t in expected.items() if kinds.get(n) not in t]  # fmt: skip
    if query.panel is not None:
        missing = _referenced_fields(query.panel) - set(names)
        problems += [f"the panel refers to missing column {m!r}" for m in sorted(missing)]
    return problems


#: The planted series' method never changed: test_method_change_is_an_annotation_not_a_regression
#: shows that query's rows on the series whose method did.
EMPTY_FOR_THE_PLANTED_SERIES = {("kw-history", "Method changes and baseline resets")}


def test_every_panel_annotation_and_variable_query_runs_as_reader(seeded, reader):
    checked = 0
    for dashboard in catalog.dashboards():
        variables = inventory.resolve(
            dashboard, seeded.request, _runner(reader), _choices(seeded).get(dashboard["uid"])
        )
        for name, variable in variables.items():
            assert variable.values, f"{dashboard['uid']}: variable {name} has no options"
        for query in inventory.dashboard_queries(dashboard):
            names, types, rows = reader(expand(query.sql, seeded.request, variables))
            where = f"{dashboard['uid']} {query.kind} {query.title!r}"
            assert _column_problems(query, names, types) == [], where
            if (dashboard["uid"], query.title) not in EMPTY_FOR_THE_PLANTED_SERIES:
                assert rows, f"{where} returned no rows on the seeded history"
            checked += 1
    assert checked >= 25


def test_every_query_runs_where_a_variable_has_no_values(pg_server):
    """An install with nothing stored yet, or without a communication suite: every variable
    resolves to no values, and no query may fail on it (a multi-value one used to expand to
    ``IN ()``)."""
    name = "t_dashboards_empty"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch')
    request = Request(END - timedelta(days=30), datetime.now(UTC))
    with psycopg.connect(as_role(pg_server.url(name), "kernelwatch_reader")) as conn:

        def run(sql: str):
            cur = conn.execute(sql)
            return [d.name for d in cur.description], cur.fetchall()

        ran = 0
        for dashboard in catalog.dashboards():
            variables = inventory.resolve(dashboard, request, run)
            if dashboard["uid"] == "kw-comm":
                assert {n: v.values for n, v in variables.items()} == dict.fromkeys(
                    ("repository", "gpu", "kernel"), ()
                )
            for query in inventory.dashboard_queries(dashboard):
                names, _rows = run(expand(query.sql, request, variables))  # raises on a failure
                assert names, (dashboard["uid"], query.title)
                ran += 1
        assert ran >= 40


def test_every_alert_rule_returns_labels_and_one_value(seeded, reader):
    now = datetime.now(UTC)
    for spec, query in inventory.alert_queries(SEEDED):
        names, types, _rows = reader(expand(query.sql, inventory.alert_request(spec, now)))
        kinds = dict(zip(names, types, strict=True))
        numeric = [n for n, t in kinds.items() if t in NUMERIC]
        assert len(numeric) == 1, (spec.uid, kinds)
        assert all(t in TEXT for n, t in kinds.items() if n not in numeric), (spec.uid, kinds)


def _firing(reader, spec: alerts.RuleSpec) -> list[dict]:
    """The instances of ``spec`` that fire now: rows whose value is above the threshold."""
    names, types, rows = reader(expand(spec.sql, inventory.alert_request(spec, datetime.now(UTC))))
    value = next(n for n, t in zip(names, types, strict=True) if t in NUMERIC)
    instances = [dict(zip(names, row, strict=True)) for row in rows]
    return [i for i in instances if i[value] is not None and float(i[value]) > spec.above]


#: The seeded history's nightlies run in this pool.
SEEDED = alerts.AlertSettings("grafana", ("h100-pool",), "docs")


def test_alert_rules_fire_on_the_planted_conditions(seeded, reader):
    rules = {spec.uid: spec for spec in alerts.rules(SEEDED)}
    new = _firing(reader, rules["kw-regression-open"])
    assert str(seeded.regression_id) in {i["regression_id"] for i in new}
    stale = _firing(reader, rules["kw-regression-stale"])
    assert stale and str(seeded.regression_id) not in {i["regression_id"] for i in stale}
    failed = _firing(reader, rules["kw-run-failed"])
    assert [(i["device_model"], i["trigger"]) for i in failed] == [("NVIDIA H200", "nightly")]
    missing = _firing(reader, rules["kw-nightly-missing"])
    assert [i["device_model"] for i in missing] == [MODELS[H100][0]]


def test_a_retired_pool_raises_nothing(seeded, reader):
    retired = alerts.AlertSettings("grafana", ("b200-pool",), "docs")
    for spec in alerts.rules(retired):
        if spec.kind == "pipeline":
            assert _firing(reader, spec) == [], spec.uid


def test_planted_regression_is_open_and_on_the_fleet_overview(seeded, reader):
    assert seeded.report.opened, seeded.report
    rows = _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
    (planted,) = [r for r in rows if r["regression_id"] == seeded.regression_id]
    assert planted["state"] == "untriaged"
    assert "flash_attention" in planted["kernels"] and planted["device_models"] == "NVIDIA B200"
    assert planted["magnitude"] == pytest.approx(SLOWDOWN - 1, abs=0.02)
    assert planted["culprit_sha"] == sha(PLANT_DAY)  # written back by the bisection
    regressed = _panel_rows(
        seeded, reader, "kw-fleet", "Kernels that regressed in the time range, per GPU"
    )
    assert any(r["kernel"] == "flash_attention" and r["device_model"] == "NVIDIA B200"
               and r["open_regressions"] >= 1 for r in regressed)  # fmt: skip


def test_fleet_matrices_show_the_planted_slowdown_and_every_kernel_gpu_cell(seeded, reader):
    drift = _panel_rows(
        seeded, reader, "kw-fleet",
        "Latest nightly / first nightly of the range (geometric mean over cases)",
    )  # fmt: skip
    by_cell = {(r["kernel"], r["device_model"]): r["ratio_geomean"] for r in drift}
    assert len(by_cell) == 7 * 3
    planted = by_cell.pop(("flash_attention", "NVIDIA B200"))
    # two of flash_attention's three dtypes slowed by 10%: geometric mean 1.1^(2/3)
    assert planted == pytest.approx(SLOWDOWN ** (2 / 3), abs=0.02)
    assert all(abs(ratio - 1) < 0.02 for ratio in by_cell.values()), by_cell
    sol = _panel_rows(
        seeded, reader, "kw-fleet",
        "%SOL heat map: mean %SOL of the latest nightly, per kernel and GPU",
    )  # fmt: skip
    sols = {(r["kernel"], r["device_model"]): r["mean_pct_sol"] for r in sol}
    assert len(sols) == 21
    assert sols.pop(("flash_attention", "NVIDIA B200")) == pytest.approx(
        70 * (2 / SLOWDOWN + 1) / 3
    )
    assert all(v == pytest.approx(70) for v in sols.values())


def test_kernel_history_marks_the_change_point_and_bisection(seeded, reader):
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-history"]
    run = _runner(reader)
    variables = inventory.resolve(dashboard, seeded.request, run, HISTORY_CHOICE)
    (case_query,) = [v["query"] for v in dashboard["templating"]["list"] if v["name"] == "case"]
    names, rows = run(expand(case_query, seeded.request, variables))
    assert seeded.planted_key in [row[names.index("__value")] for row in rows]

    changes = _panel_rows(seeded, reader, "kw-history", "Change points")
    plant_at = END - timedelta(days=DAYS - PLANT_DAY) + timedelta(hours=3)
    assert any(abs(r["time"] - plant_at) <= timedelta(days=2) and "regression" in r["tags"]
               for r in changes), changes  # fmt: skip
    verdicts = _panel_rows(seeded, reader, "kw-history", "Bisection verdicts")
    assert sorted(r["tags"] for r in verdicts) == ["bisect,SAME", "bisect,SAME", "bisect,SLOWER"]
    points = _panel_rows(
        seeded, reader, "kw-history", "Points, with the command that measures each commit again"
    )
    assert len(points) == DAYS
    assert all("--dtype fp16" in p["repro"] and p["commit_sha"] in p["repro"] for p in points)
    medians = _panel_rows(
        seeded, reader, "kw-history", "Median with 95% CI: $kernel $dtype on $gpu"
    )
    before = np.median([p["median"] for p in medians[:PLANT_DAY]])
    after = np.median([p["median"] for p in medians[PLANT_DAY:]])
    assert after / before == pytest.approx(SLOWDOWN, abs=0.02)
    assert all(p["ci_low"] <= p["median"] <= p["ci_high"] for p in medians)


def test_method_change_is_an_annotation_not_a_regression(seeded, reader):
    names, _types, rows = reader(
        """SELECT series_key FROM report_series
        WHERE device_model = 'NVIDIA H200' AND timer = 'cuda-graph'"""
    )
    ((new_series,),) = rows
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-history"]
    variables = inventory.resolve(dashboard, seeded.request, _runner(reader), {"case": new_series})
    (query,) = [q for q in inventory.dashboard_queries(dashboard)
                if q.title == "Method changes and baseline resets"]  # fmt: skip
    names, _types, rows = reader(expand(query.sql, seeded.request, variables))
    annotations = [dict(zip(names, r, strict=True)) for r in rows]
    assert [a["tags"] for a in annotations] == ["method_change"]
    assert "cuda-events/cold/h1 to cuda-graph/cold/h1" in annotations[0]["text"]
    names, _types, rows = reader(
        f"""SELECT count(*) FROM report_change_points cp
        JOIN report_series s ON s.series_key = cp.series_key
        JOIN report_series n ON n.kernel = s.kernel AND n.dtype = s.dtype
            AND n.case_label = s.case_label AND n.device_model = s.device_model
        WHERE n.series_key = '{new_series}'"""
    )
    assert rows == [(0,)]  # neither the old nor the new series has a change point


def test_build_panels_show_the_lost_tensor_core_path(seeded, reader):
    registers = _panel_rows(seeded, reader, "kw-builds", "Registers per thread")
    sm100 = [r for r in registers if r["metric"].startswith("attn_fwd sm_100a fp16")]
    assert len(sm100) == DAYS
    assert [r["registers"] for r in sm100] == [168] * PLANT_DAY + [255] * (DAYS - PLANT_DAY)
    paths = _panel_rows(seeded, reader, "kw-builds", "Tensor-core path")
    ranks = {r["tensor_core_rank"] for r in paths if r["metric"].startswith("attn_fwd sm_100a")}
    assert ranks == {TENSOR_CORE_RANK["tcgen05"], TENSOR_CORE_RANK["HMMA"]}
    latest = _panel_rows(seeded, reader, "kw-builds", "Builds of the latest nightly")
    assert {(r["arch"], r["tensor_core"], r["spill_store_bytes"]) for r in latest} == {
        ("sm_90a", "HGMMA", 0),
        ("sm_100a", "HMMA", 1024),
    }


def test_health_quarantines_the_throttling_gpu_and_lists_the_failed_run(seeded, reader):
    rows = _panel_rows(
        seeded, reader, "kw-health", "Devices over the time range (quarantined first)"
    )
    noisy = devices(H200)[3]
    quarantined = [d for d in rows if d["quarantined"]]
    assert [(d["host"], d["device_uuid"]) for d in quarantined] == [(noisy.host, noisy.uuid)]
    assert "samples throttled" in quarantined[0]["reason"]
    failed = _panel_rows(seeded, reader, "kw-health", "Failed and partial runs")
    assert [(r["status"], r["device_model"]) for r in failed] == [("failed", "NVIDIA H200")]


def test_triage_board_shows_bisection_progress_and_history(seeded, reader):
    board = _panel_rows(seeded, reader, "kw-triage", "Regressions")
    (planted,) = [r for r in board if r["regression_id"] == seeded.regression_id]
    assert planted["bisect_steps"] == 3 and planted["last_verdict"] == "SAME"
    assert planted["last_actor"] == "bisect"
    assert {r["state"] for r in board} <= {"untriaged", "acknowledged", "investigating"}
    history = _panel_rows(seeded, reader, "kw-triage", "Triage history")
    assert any(r["regression_id"] == seeded.regression_id and r["actor"] == "bisect"
               for r in history)  # fmt: skip


def test_reader_role_cannot_read_tables(seeded):
    with (
        psycopg.connect(seeded.reader) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute("SELECT count(*) FROM measurements")


def test_migration_0012_keeps_the_checks_stored_before_it(pg_server):
    """PR checks stored at 0011 become checks with a verdict from their findings, and a
    report that was a worker's path becomes no link; a URL stays."""
    from kernelwatch.store import migrate

    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS t_pr_migrate")
        conn.execute("CREATE DATABASE t_pr_migrate TEMPLATE kernelwatch")
    url = pg_server.url("t_pr_migrate")
    fleet = Fleet(models=3, series=2, days=1, samples=3, pr_runs_per_day=0)
    rng = np.random.default_rng(5)
    commit = CommitInfo(sha(0), (), END.isoformat(), "c", "main")
    runs = [make_run(fleet, rng, devices(B200)[0], cases(2), np.full(2, 1e4), END, "pr", commit)
            for _ in range(4)]  # fmt: skip
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for run in runs:
            ingester.ingest(run)
        ids = [conn.execute("SELECT id FROM runs WHERE run_id = %s", (r.info.run_id,))
               .fetchone()[0] for r in runs]  # fmt: skip
    # Stored by today's ingest (it writes today's columns), then taken down to 0011, where
    # the PR checks were findings.
    migrate.downgrade(url, "0011")
    with psycopg.connect(url) as conn:
        findings = [
            (ids[1], ids[0], "SLOWER", "/var/lib/kernelwatch/reports/pr-1.html"),
            (ids[3], ids[2], "SAME", "https://reports.example/kw/pr-2.html"),
        ]
        for head, base, verdict, report in findings:
            conn.execute(
                "INSERT INTO pr_findings (head_run_id, base_run_id, kind, kernel, case_label, "
                "dtype, verdict, report) VALUES (%s, %s, 'timing', 'gemm', 'm=1', 'fp16', %s, %s)",
                (head, base, verdict, report),
            )
        conn.commit()
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        checks = conn.execute(
            "SELECT head_run_id, outcome, verdict, report FROM pr_checks ORDER BY 1"
        ).fetchall()
    assert checks == [
        (ids[1], 1, "regression", None),
        (ids[3], 0, "no regression", "https://reports.example/kw/pr-2.html"),
    ]
    migrate.downgrade(url, "0011")
    with psycopg.connect(url) as conn:
        kept = conn.execute("SELECT head_run_id, report FROM pr_findings ORDER BY 1").fetchall()
    assert kept == [(ids[1], None), (ids[3], "https://reports.example/kw/pr-2.html")]


def test_a_downgrade_below_0004_drops_the_views_functions_and_its_column(pg_server):
    """Views exist at the head alone (``store/views/``): a downgrade drops them all, and
    0004's downgrade its column."""
    from kernelwatch.store import migrate

    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS t_dash_migrate")
        conn.execute("CREATE DATABASE t_dash_migrate TEMPLATE kernelwatch")
    url = pg_server.url("t_dash_migrate")
    mine = """SELECT (SELECT count(*) FROM pg_views WHERE viewname LIKE 'report_%'),
        (SELECT count(*) FROM pg_proc WHERE proname LIKE 'report_%'),
        (SELECT count(*) FROM information_schema.columns
            WHERE table_name = 'series' AND column_name = 'case_label')"""
    with psycopg.connect(url) as conn:
        at_head = conn.execute(mine).fetchone()
    migrate.downgrade(url, "0003")
    with psycopg.connect(url) as conn:
        assert conn.execute(mine).fetchone() == (0, 0, 0)
    assert at_head[0] > 7 and at_head[1:] == (3, 1)


def test_benchmark_script_small_scale(pg_server, store_url):
    try:
        out = subprocess.run(
            [sys.executable, str(ROOT / "scripts" / "bench_dashboards.py"), "--models", "2",
             "--series", "30", "--days", "12", "--samples", "5", "--pr-series", "5",
             "--repeats", "3", "--database-url", store_url],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
    finally:
        # The script gives the reader role a password of its run, and roles are the whole
        # server's: later tests on this worker's server log in with the tests' password.
        set_passwords(pg_server.url("postgres"))
    psycopg.connect(as_role(store_url, "kernelwatch_reader")).close()
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["rows"]["build_metrics"] > 0 and report["rows"]["bisect_steps"] > 0
    expected = {f"{d['uid']} {q.kind}: {q.title}" for d in catalog.dashboards()
                for q in inventory.dashboard_queries(d)}  # fmt: skip
    expected |= {f"alert: {spec.title}" for spec in alerts.rules()}
    assert expected <= set(report["queries"])
    assert all(t["p95_ms"] >= t["p50_ms"] > 0 for t in report["queries"].values())


def test_communication_panel_shows_bus_bandwidth_by_size_and_world_against_the_peak(seeded, reader):
    rows = _panel_rows(
        seeded, reader, "kw-comm",
        "Bus bandwidth by message size and world size (latest nightly), against the "
        "interconnect's peak",
    )  # fmt: skip
    cells = {(r["world_size"], r["message_bytes"]): r for r in rows}
    assert sorted(cells) == [(w, s) for w in COMM_WORLDS for s in COMM_SIZES]
    largest = cells[8, 1 << 30]
    assert largest["busbw_peak_gbps"] == COMM_PEAK_GBPS and largest["fabric"] == "nvlink"
    assert largest["pct_peak"] == pytest.approx(80 * (1 << 30) / ((1 << 30) + (1 << 20)))
    assert largest["busbw_gbps"] == pytest.approx(largest["algbw_gbps"] * 7 / 4)


def _panel(uid: str, title: str) -> dict:
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == uid]
    (panel,) = [p for p in dashboard["panels"] if p["title"] == title]
    return panel


def _glance(seeded, reader) -> dict:
    (row,) = _panel_rows(seeded, reader, "kw-fleet", "At a glance")
    return row


def test_at_a_glance_turns_red_when_the_alert_fires_and_says_what_is_too_short(seeded, reader):
    panel = _panel("kw-fleet", "At a glance")
    config = panel["fieldConfig"]
    overrides = {o["matcher"]["options"]: o["properties"] for o in config["overrides"]}
    hours = {p["id"]: p["value"] for p in overrides[HOURS]}
    assert hours["unit"] == "h"
    assert [s["value"] for s in hours["thresholds"]["steps"]] == [None, NIGHTLY_MISSING_HOURS]
    assert panel["fieldConfig"]["defaults"]["unit"] == "none"
    # The cuda-graph series of H200 started 6 nights ago: too short for detection to judge.
    assert _glance(seeded, reader)["series too short to judge"] == 1


HOURS = "hours since the stalest watched pool's nightly"


def test_at_a_glance_hours_are_those_the_missing_nightly_alert_judges(seeded, reader):
    """The stat reads the alert's pools: red exactly when kw-nightly-missing fires (H100
    stopped in the watched pool), and nothing where only a retired pool is watched."""
    for settings in (SEEDED, alerts.AlertSettings("grafana", ("b200-pool",), "docs")):
        (fleet,) = [d for d in catalog.dashboards(settings.pools) if d["uid"] == "kw-fleet"]
        variables = inventory.resolve(fleet, seeded.request, _runner(reader))
        (query,) = [q for q in inventory.dashboard_queries(fleet) if q.title == "At a glance"]
        names, _types, (row,) = reader(expand(query.sql, seeded.request, variables))
        hours = dict(zip(names, row, strict=True))[HOURS]
        rules = {spec.uid: spec for spec in alerts.rules(settings)}
        firing = _firing(reader, rules["kw-nightly-missing"])
        if settings is SEEDED:
            assert float(hours) > NIGHTLY_MISSING_HOURS and firing
            # (both read now(): a few calls apart)
            alerted = max(float(i["hours_since"]) for i in firing)
            assert float(hours) == pytest.approx(alerted, abs=0.01)
        else:
            assert hours is None and firing == []


def test_regressed_counts_leave_out_false_positives_and_wont_fix(seeded, reader):
    rows = _panel_rows(
        seeded, reader, "kw-fleet", "Kernels that regressed in the time range, per GPU"
    )
    start, end = (f"'{t.isoformat()}'" for t in (seeded.request.start, seeded.request.end))
    _names, _types, expected = reader(
        f"""SELECT kernel, device_model, count(DISTINCT regression_id)
        FROM report_change_points
        WHERE direction = 'regression' AND at BETWEEN {start} AND {end}
            AND regression_state NOT IN ('false_positive', 'wont_fix')
            AND repository = '{REPOSITORY}'
        GROUP BY 1, 2"""
    )
    _names, _types, dismissed = reader(
        "SELECT count(*) FROM report_regressions WHERE state = 'false_positive'"
    )
    assert dismissed[0][0] >= 1
    assert {(r["kernel"], r["device_model"]): r["regressions"] for r in rows} == {
        (k, d): n for k, d, n in expected
    }
    assert _glance(seeded, reader)["kernel x GPU regressed in range"] == len(expected)


def _sol_rows(seeded, reader, title: str, request: Request, choice: dict) -> list[dict]:
    return _rows_of(reader, "kw-sol", title, request, choice)


def _rows_of(reader, uid: str, title: str, request: Request, choice: dict | None) -> list[dict]:
    """One panel's rows as dicts, for ``request`` and the variables ``choice`` picks."""
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == uid]
    variables = inventory.resolve(dashboard, request, _runner(reader), choice)
    (query,) = [q for q in inventory.dashboard_queries(dashboard) if q.title == title]
    names, _types, rows = reader(expand(query.sql, request, variables))
    return [dict(zip(names, row, strict=True)) for row in rows]


def test_speed_of_light_panels_honour_the_time_range_and_the_dtype(seeded, reader):
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-sol"]
    titles = [q.title for q in inventory.dashboard_queries(dashboard)]
    before_latest = Request(seeded.request.start, END - timedelta(days=10))
    for title in titles:
        assert _sol_rows(seeded, reader, title, before_latest, {}) == [], title
    speedups = _sol_rows(seeded, reader, titles[1], seeded.request, {"dtype": ["bf16"]})
    _names, _types, with_bf16 = reader(
        f"SELECT DISTINCT kernel FROM report_series WHERE dtype = 'bf16' "
        f"AND repository = '{REPOSITORY}'"
    )
    kernels = {r["kernel"].split(" on ")[0] for r in speedups}
    assert kernels == {k for (k,) in with_bf16}


def test_triage_counts_count_what_the_board_lists(seeded, reader):
    last_day = Request(datetime.now(UTC) - timedelta(days=1), datetime.now(UTC))
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-triage"]
    every_state = {"state": STATES}
    variables = inventory.resolve(dashboard, last_day, _runner(reader), every_state)
    counted, listed = (
        reader(expand(q.sql, last_day, variables))[2]
        for title in ("Regressions per state", "Regressions")
        for q in inventory.dashboard_queries(dashboard)
        if q.title == title
    )
    assert sum(n for _state, n in counted) == len(listed)


def test_bisection_marks_sit_on_the_nightly_point_of_their_commit(seeded, reader):
    verdicts = _panel_rows(seeded, reader, "kw-history", "Bisection verdicts")
    points = _panel_rows(
        seeded, reader, "kw-history", "Points, with the command that measures each commit again"
    )
    at = {p["commit_sha"]: p["measured_at"] for p in points}
    probes = {sha(day) for day in (22, PLANT_DAY, PLANT_DAY - 1)}
    assert {v["time"] for v in verdicts} == {at[s] for s in probes}


def test_latest_nightly_panels_mark_partial_runs():
    marks = {"report_nightly_latest": "run_status", "report_nightly_kernels": "partial_runs"}
    for dashboard in catalog.dashboards():
        for query in inventory.dashboard_queries(dashboard):
            for view, mark in marks.items():
                if view in query.sql:
                    assert mark in query.sql, (dashboard["uid"], query.title)


def test_the_worst_case_is_shown_beside_the_geometric_mean(seeded, reader):
    worst = _panel_rows(
        seeded, reader, "kw-fleet", "Latest nightly / first nightly of the range (worst case)"
    )
    by_cell = {(r["kernel"], r["device_model"]): r["ratio_worst"] for r in worst}
    assert by_cell[("flash_attention", "NVIDIA B200")] == pytest.approx(SLOWDOWN, abs=0.03)


def _follow(panel: dict, row: dict, reader) -> tuple[dict[str, str], Request, dict]:
    """Click ``row``'s data link: the kernel history's variables and time range from the
    expanded URL, with every variable checked against the options Grafana would offer."""
    (link,) = [
        lk for lk in panel["fieldConfig"]["defaults"]["links"] if "/d/kw-history/" in lk["url"]
    ]
    url = urlparse(expand_link(link["url"], row))
    assert url.path == "/d/kw-history/"
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    choice = {k.removeprefix("var-"): v for k, v in query.items() if k.startswith("var-")}
    request = Request(*(datetime.fromtimestamp(int(query[k]) / 1000, UTC) for k in ("from", "to")))
    (history,) = [d for d in catalog.dashboards() if d["uid"] == "kw-history"]
    run = _runner(reader)
    variables = inventory.resolve(history, request, run, choice)
    for variable in history["templating"]["list"]:
        names, rows = run(expand(variable["query"], request, variables))
        column = names.index("__value") if "__value" in names else 0
        assert choice[variable["name"]] in [r[column] for r in rows], variable["name"]
    return choice, request, variables


def _history_rows(reader, request: Request, variables, title: str) -> list[dict]:
    (history,) = [d for d in catalog.dashboards() if d["uid"] == "kw-history"]
    (query,) = [q for q in inventory.dashboard_queries(history) if q.title == title]
    names, _types, rows = reader(expand(query.sql, request, variables))
    return [dict(zip(names, row, strict=True)) for row in rows]


def test_journey_from_an_open_regression_to_its_culprit_magnitude_and_repro(seeded, reader):
    rows = _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
    (row,) = [r for r in rows if r["regression_id"] == seeded.regression_id]
    choice, request, variables = _follow(_panel("kw-fleet", "Open regressions"), row, reader)
    assert (choice["kernel"], choice["gpu"]) == ("flash_attention", "NVIDIA B200")
    assert request.start < END - timedelta(days=DAYS - PLANT_DAY) < request.end
    changes = _history_rows(reader, request, variables, "Change points of this series")
    (change,) = [c for c in changes if c["regression_id"] == seeded.regression_id]
    assert change["culprit_sha"] == sha(PLANT_DAY)
    assert change["rel_change"] == pytest.approx(SLOWDOWN - 1, abs=0.02)
    points = _history_rows(
        reader, request, variables, "Points, with the command that measures each commit again"
    )
    (culprit,) = [p for p in points if p["commit_sha"] == change["culprit_sha"]]
    assert f"git worktree add /tmp/kw-{sha(PLANT_DAY)[:12]} {sha(PLANT_DAY)}" in culprit["repro"]


MORNING = "Last night: what the nightly decided, then the rest"


def test_morning_after_shows_what_the_nightly_decided_with_that_decisions_numbers(seeded, reader):
    rows = _panel_rows(seeded, reader, "kw-fleet", MORNING)
    # The confirmed regression first, with the A/B's own range and numbers, and the one
    # magnitude the open regressions show for it; the night-over-night ratio is context.
    first = rows[0]
    assert (first["decided"], first["kernel"], first["regression_id"]) == (
        "regression",
        "rms_norm",
        seeded.confirmed,
    )
    assert (first["ab_verdict"], first["ab_ratio"]) == ("SLOWER", AB_RATIO)
    assert (first["ab_ci_low"], first["ab_ci_high"]) == AB_CI
    assert (first["ab_base_sha"], first["ab_head_sha"]) == (sha(AB_BASE_DAY), sha(DAYS - 1))
    assert first["previous_sha"] == sha(DAYS - 2) != first["ab_base_sha"]
    (opened,) = [r for r in _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
                 if r["regression_id"] == seeded.confirmed]  # fmt: skip
    assert first["magnitude"] == opened["magnitude"] == pytest.approx(AB_RATIO - 1)
    (planted,) = [r for r in rows if r["series_key"] == seeded.planted_key]
    assert (planted["decided"], planted["ab_verdict"]) == ("checked_noise", "SAME")
    assert planted["commit_sha"] == sha(DAYS - 1) and planted["previous_sha"] == sha(DAYS - 2)
    # Nothing else moved: the nightly suspected nothing else, whatever two medians say.
    rest = [r for r in rows if r["series_key"] not in (first["series_key"], planted["series_key"])]
    assert {r["decided"] for r in rest} == {"not suspected"}
    assert all(r["ab_verdict"] is None and r["magnitude"] is None for r in rest)
    assert [r["decided"] for r in rows[:2]] == ["regression", "checked_noise"]
    findings = _panel_rows(
        seeded, reader, "kw-fleet", "Last night's correctness and static findings"
    )
    assert {(f["kind"], f["case_label"]) for f in findings} == {
        ("correctness", "tokens=7"), ("static", "attn_fwd sm_100a tokens=1")}  # fmt: skip
    _choice, request, variables = _follow(_panel("kw-fleet", MORNING), planted, reader)
    points = _history_rows(
        reader, request, variables, "Points, with the command that measures each commit again"
    )
    assert {sha(DAYS - 1), sha(DAYS - 2)} <= {p["commit_sha"] for p in points}


def test_a_culprit_merged_with_others_has_its_repro_and_its_mark_on_its_night(seeded, reader):
    """The confirmed regression's culprit was one of several commits merged on the last
    night: the morning row and the open regression give the command that measures it
    against its parent with the case pinned (kernel, workload, dtype, parameters), and its
    bisection verdict sits on the night it first ran, not days earlier at its author time."""
    (case,) = [c for c in cases(21) if (c.kernel, c.dtype) == ("rms_norm", "bf16")][:1]
    expected = (
        f"kernelwatch pr-check --repository {REPOSITORY} --base {sha(DAYS - 2)} "
        f"--head {MERGED.sha} --kernel rms_norm --workload llm --dtype bf16"
    ) + "".join(f" --param {k}={v}" for k, v in sorted(case.params.items()))
    (opened,) = [r for r in _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
                 if r["regression_id"] == seeded.confirmed]  # fmt: skip
    assert (opened["culprit_sha"], opened["repro"]) == (MERGED.sha, expected)
    first = _panel_rows(seeded, reader, "kw-fleet", MORNING)[0]
    assert (first["regression_id"], first["repro"]) == (seeded.confirmed, expected)
    _choice, request, variables = _follow(_panel("kw-fleet", MORNING), first, reader)
    (mark,) = _history_rows(reader, request, variables, "Bisection verdicts")
    points = _history_rows(
        reader, request, variables, "Points, with the command that measures each commit again"
    )
    last_night = max(p["measured_at"] for p in points)
    assert mark["time"] == last_night and request.start < mark["time"] < request.end


def test_morning_after_flags_a_stopped_pool_and_a_failed_night(seeded, reader):
    rows = _panel_rows(seeded, reader, "kw-fleet", MORNING)
    by_model = {}
    for r in rows:
        by_model.setdefault(r["device_model"], []).append(r["caveats"])
    # H100's nightly stopped H100_STOPS nights ago: its rows are not last night's.
    assert all(c.startswith("stale: ") for c in by_model[MODELS[H100][0]])
    assert not any("stale" in c for m in (H200, B200) for c in by_model[MODELS[m][0]])
    # H200's newest nightly failed: its rows compare the two nights before that.
    assert all("the nightly after it failed" in c for c in by_model[MODELS[H200][0]])
    # The stale rows come after the fresh ones that the nightly decided nothing about.
    unsuspected = [r for r in rows if r["decided"] == "not suspected"]
    stale = ["stale" in r["caveats"] for r in unsuspected]
    assert stale == sorted(stale) and any(stale)


def test_morning_after_flags_a_failed_run_between_the_two_nights(seeded):
    """A failed nightly between B200's last two: the comparison spans it (stored and rolled
    back in one transaction, so the module's other tests never see it)."""
    b200 = MODELS[B200][0]
    flags = "SELECT DISTINCT failed_between, failed_after FROM report_night_comparison "
    flags += "WHERE device_model = %s"
    with psycopg.connect(seeded.url) as conn, conn.transaction():
        assert conn.execute(flags, (b200,)).fetchall() == [(0, 0)]
        (between,) = conn.execute(
            "SELECT DISTINCT previous_night + (night - previous_night) / 2 "
            "FROM report_night_comparison WHERE device_model = %s",
            (b200,),
        ).fetchone()
        fleet = Fleet(models=3, series=1, days=1, samples=3, pr_runs_per_day=0)
        commit = CommitInfo("e" * 40, (sha(DAYS - 2),), between.isoformat(), "broke", "main")
        run = make_run(fleet, np.random.default_rng(3), devices(B200)[0], cases(1),
                       np.full(1, 1e4), between, "nightly", commit)  # fmt: skip
        Ingester(conn).ingest(Run(dataclasses.replace(run.info, status="failed"), ()))
        spanned = conn.execute(flags, (b200,)).fetchall()
        raise psycopg.Rollback()
    assert spanned == [(1, 0)]


def test_journey_from_a_pull_request_to_its_merge_verdict_medians_and_report(seeded, reader):
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-pr"]
    run = _runner(reader)
    # The picker opens on the newest check and names its pull request.
    names, options = run(expand(dashboard["templating"]["list"][1]["query"], seeded.request,
                                inventory.resolve(dashboard, seeded.request, run)))  # fmt: skip
    text = [dict(zip(names, o, strict=True))["__text"] for o in options]
    assert text[0].startswith("#42 feature/fused-attn by alice at ffffffffffff (2 GPUs, ")
    assert text[1].startswith("#41 docs by bob at dddddddddddd (1 GPU, ")
    assert inventory.resolve(dashboard, seeded.request, run)["check"].values == (PR_HEAD,)
    verdicts = _panel_rows(seeded, reader, "kw-pr", "Merge verdict, per GPU")
    assert [(r["device_model"], r["outcome"]) for r in verdicts] == [
        (MODELS[B200][0], 1), (MODELS[H200][0], 1)]  # fmt: skip
    assert {r["pr"] for r in verdicts} == {"#42"} and {r["author"] for r in verdicts} == {"alice"}
    b200 = verdicts[0]
    assert b200["merge_verdict"] == "3 cases slower, 2 static regressions"
    assert b200["report_url"] == f"{REPORT_BASE}/pr-42-{B200}/compare.html"
    rows = _panel_rows(seeded, reader, "kw-pr", "A/B verdicts, slowest first")
    assert len(rows) == 42 and {r["head_sha"] for r in rows} == {PR_HEAD}
    slower = [r for r in rows if r["verdict"] == "SLOWER"]
    assert {r["kernel"] for r in slower} == {"flash_attention"} and len(slower) == 6
    assert rows[:6] == sorted(slower, key=lambda r: -r["ratio"])
    for r in slower:
        assert r["ci_low"] <= r["ratio"] <= r["ci_high"]
        assert r["ratio"] == pytest.approx(SLOWDOWN, abs=0.03)
        assert r["head_us"] / r["base_us"] == pytest.approx(r["ratio"], rel=0.03)
    assert {r["verdict"] for r in rows[6:]} <= {"SAME", "AMBIGUOUS", "FASTER"}
    (link,) = _panel("kw-pr", "A/B verdicts, slowest first")["fieldConfig"]["defaults"]["links"]
    assert expand_link(link["url"], rows[0]).startswith(f"{REPORT_BASE}/pr-42-")
    static = _panel_rows(seeded, reader, "kw-pr", "Static findings and correctness failures")
    assert static and {(r["kind"], r["kernel"], r["function"], r["arch"]) for r in static} == {
        ("static", "flash_attention", "attn_fwd", "sm_100a")}  # fmt: skip
    assert {(r["verdict"], r["before_value"], r["after_value"]) for r in static} >= {
        ("tensor_core", "tcgen05", "HMMA")}  # fmt: skip
    counts = _panel_rows(seeded, reader, "kw-pr", "Verdicts of this check")
    assert sum(c["cases"] for c in counts) == 42


def test_quarter_view_plots_ours_and_the_baselines_medians_for_three_cases(seeded, reader):
    assert len(seeded.quarter_keys) == 3
    title = "Median, ours and the baseline library's (log scale)"
    rows = _panel_rows(seeded, reader, "kw-quarter", title)
    lines: dict[str, list] = {}
    for row in rows:
        lines.setdefault(row["metric"], []).append(row)
    ours = sorted(m for m in lines if m.endswith("(ours)"))
    # The library by the first word of its name: a legend stays one line.
    torch = sorted(m for m in lines if m.endswith(f"({BASELINE.split()[0]})"))
    assert len(ours) == len(torch) == 3 and len(lines) == 6
    assert all(m.startswith("flash_attention ") and " on NVIDIA B200 " in m for m in ours)
    for mine, theirs in zip(ours, torch, strict=True):
        assert len(lines[mine]) == len(lines[theirs]) == DAYS
        ratio = np.median([t["median_ns"] / o["median_ns"]
                           for o, t in zip(lines[mine], lines[theirs], strict=True)])  # fmt: skip
        assert ratio == pytest.approx(1.2, rel=0.03)  # the seeded library is 20% slower
    by_commit = _panel_rows(
        seeded, reader, "kw-quarter",
        "Median by commit order, ours and the baseline library's (log scale)",
    )  # fmt: skip
    assert {r["commit_index"] for r in by_commit} == set(range(1, DAYS + 1))
    panel = _panel("kw-quarter", title)
    assert panel["fieldConfig"]["defaults"]["custom"]["scaleDistribution"]["type"] == "log"


def _quarter_rows(reader, request: Request, title: str, choice: dict | None = None):
    return _rows_of(reader, "kw-quarter", title, request, choice)


def test_journey_per_family_and_gpu_speedup_and_sol_at_two_dates_of_the_quarter(seeded, reader):
    """Over a range before the planted slowdown attention held its speedup over the library
    on B200; over the whole quarter it lost the planted share: two of its three cases 10%."""
    old_new = "Old -> new over the time range, per family and GPU"
    before = Request(END - timedelta(days=DAYS), END - timedelta(days=DAYS - PLANT_DAY + 1))
    cells = {}
    for name, request in (("before", before), ("quarter", seeded.request)):
        rows = _quarter_rows(reader, request, old_new)
        cells[name] = {(r["family"], r["device_model"], r["timer"]): r for r in rows}
    attention = ("attention", MODELS[B200][0], "cuda-events")
    lost = SLOWDOWN ** (2 / 3)  # the geometric mean over three cases, two slowed
    row = cells["before"][attention]
    assert (row["speedup_old"], row["speedup_new"]) == (pytest.approx(1.2), pytest.approx(1.2))
    row = cells["quarter"][attention]
    assert row["speedup_old"] == pytest.approx(1.2)
    assert row["speedup_new"] == pytest.approx(1.2 / lost)
    assert row["speedup_change"] == pytest.approx(1 / lost)
    assert row["sol_new"] == pytest.approx(70 * (2 / SLOWDOWN + 1) / 3)
    unmoved = [r for k, r in cells["quarter"].items() if k != attention]
    assert unmoved and all(r["speedup_change"] == pytest.approx(1.0) for r in unmoved)
    assert {k[0] for k in cells["quarter"]} >= {"attention", "norm", "gemm"}
    # Clicking the row narrows the dashboard to the family's kernels over the same nights.
    panel = _panel("kw-quarter", old_new)
    (link,) = panel["fieldConfig"]["defaults"]["links"]
    url = urlparse(expand_link(link["url"], row))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.path == "/d/kw-quarter/" and query["var-family"] == "attention"
    kernels = _quarter_rows(reader, seeded.request, "Old -> new over the time range, per kernel "
                            "and GPU", {"family": ["attention"]})  # fmt: skip
    assert {r["kernel"] for r in kernels} == {"flash_attention"}
    # The per-night lines: one per family and GPU, a method change a line of its own.
    lines = {
        r["metric"]
        for r in _quarter_rows(
            reader,
            seeded.request,
            "Speedup over the stock library, geometric mean per family and GPU",
        )
    }
    assert "attention B200" in lines
    assert {"norm H200 [cuda-events]", "norm H200 [cuda-graph]"} <= lines
    sol = _quarter_rows(reader, seeded.request, "Mean %SOL per family and GPU")
    assert max(r["mean_pct_sol"] for r in sol) == pytest.approx(70.0)


def test_the_sums_kept_at_ingest_are_those_of_the_measurements(seeded, reader):
    """Every night's kernel cell kept at ingest equals the same cell computed from the
    history points themselves, and so does every series' count of points."""
    where = f"WHERE repository = '{REPOSITORY}'"
    _n, _t, kept = reader(
        f"""SELECT night, kernel, device_model, method, cases, speedup_geomean, mean_pct_sol
        FROM report_night_kernels {where}"""
    )
    _n, _t, scanned = reader(
        f"""SELECT measured_at, kernel, device_model, method, count(*),
            exp(avg(ln(speedup))), avg(pct_sol)
        FROM report_quarter_points {where} GROUP BY 1, 2, 3, 4"""
    )
    assert len(kept) == len(scanned) > DAYS * 2 * 7
    by_cell = {row[:4]: row[4:] for row in scanned}
    for row in kept:
        assert row[4:] == pytest.approx(by_cell[row[:4]]), row[:4]
    # and each series' count of history points, which the "too short to judge" count reads
    _n, _t, counted = reader(
        f"""SELECT count(*), count(*) FILTER (WHERE l.points <> least(h.n, {POINTS_CAP}))
        FROM report_series_lengths l
            JOIN (SELECT series_key, count(*) AS n FROM report_history_points
                  GROUP BY series_key) h USING (series_key)"""
    )
    assert counted[0][0] > 63 and counted[0][1] == 0
    assert TOO_SHORT <= POINTS_CAP  # the count the glance makes is exact


def _follow_to_builds(panel: dict, row: dict, reader) -> tuple[dict[str, str], Request]:
    """Click ``row``'s link to kw-builds: its variables (each one Grafana offers) and range."""
    (link,) = [
        lk for lk in panel["fieldConfig"]["defaults"]["links"] if "/d/kw-builds/" in lk["url"]
    ]
    url = urlparse(expand_link(link["url"], row))
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    choice = {k.removeprefix("var-"): v for k, v in query.items() if k.startswith("var-")}
    request = Request(*(datetime.fromtimestamp(int(query[k]) / 1000, UTC) for k in ("from", "to")))
    (builds,) = [d for d in catalog.dashboards() if d["uid"] == "kw-builds"]
    run = _runner(reader)
    variables = inventory.resolve(builds, request, run, choice)
    for variable in builds["templating"]["list"][:2]:
        names, rows = run(expand(variable["query"], request, variables))
        column = names.index("__value") if "__value" in names else 0
        assert choice[variable["name"]] in [r[column] for r in rows], variable["name"]
    return choice, request


def test_correctness_and_static_findings_link_to_their_kernels_builds(seeded, reader):
    """A static regression has no change point: its open-regressions row and its finding of
    the night both lead to its kernel's builds around that night, where the lost path is."""
    rows = _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
    (static,) = [r for r in rows if r["regression_id"] == seeded.static]
    assert static["kind"] == "static" and static["series_key"] is None
    assert (static["kernel"], static["device_model"]) == ("flash_attention", MODELS[B200][0])
    findings = _panel_rows(
        seeded, reader, "kw-fleet", "Last night's correctness and static findings"
    )
    (finding,) = [f for f in findings if f["kind"] == "static"]
    for title, row in (
        ("Open regressions", static),
        ("Last night's correctness and static findings", finding),
    ):
        choice, request = _follow_to_builds(_panel("kw-fleet", title), row, reader)
        assert choice["kernel"] == "flash_attention" and request.start < END < request.end
        (builds,) = [d for d in catalog.dashboards() if d["uid"] == "kw-builds"]
        variables = inventory.resolve(builds, request, _runner(reader), choice)
        (query,) = [q for q in inventory.dashboard_queries(builds) if q.title == "Tensor-core path"]
        _names, _types, paths = reader(expand(query.sql, request, variables))
        assert paths, title


def test_triage_rows_link_to_the_history_of_what_moved(seeded, reader):
    rows = _panel_rows(seeded, reader, "kw-triage", "Regressions")
    (row,) = [r for r in rows if r["regression_id"] == seeded.regression_id]
    choice, _request, _variables = _follow(_panel("kw-triage", "Regressions"), row, reader)
    assert (choice["kernel"], choice["gpu"]) == ("flash_attention", "NVIDIA B200")
    title = "Suspected at night, and what the same-night A/B said"
    suspects = _panel_rows(seeded, reader, "kw-triage", title)
    (planted,) = [s for s in suspects if s["series_key"] == seeded.planted_key]
    choice, _request, _variables = _follow(_panel("kw-triage", title), planted, reader)
    assert choice["case"] == seeded.planted_key


def _sorted_rows(conn: psycopg.Connection, sql: str) -> list[tuple]:
    cur = conn.execute(sql)
    return sorted(cur.fetchall(), key=repr)


def test_the_latest_points_kept_at_ingest_give_the_rows_the_measurements_give(seeded):
    """The views read each series' latest point from ``latest_points`` (migration 0016) and
    the kernel means from the sums kept per run (0017); on the seeded history (multi-commit
    nights, a failed night, a stopped pool, PR runs) they give the rows the definitions they
    replaced computed from the measurements (``views_before.py``)."""
    with psycopg.connect(seeded.url) as conn:
        for view, before in (
            ("report_nightly_latest", views_before.NIGHTLY_LATEST),
            ("report_nightly_kernels", views_before.NIGHTLY_KERNELS),
            ("report_night_comparison", views_before.NIGHT_COMPARISON),
        ):
            now = _sorted_rows(conn, f"SELECT * FROM {view}")
            assert now and now == _sorted_rows(conn, f"SELECT * FROM ({before}) q"), view
        returns, drift = views_before.KERNEL_DRIFT_RETURNS, views_before.KERNEL_DRIFT
        conn.execute(
            f"CREATE FUNCTION pg_temp.drift_before(since timestamptz) RETURNS {returns} "
            f"LANGUAGE sql AS $fn${drift}$fn$"
        )
        for days in (3, DAYS // 2, DAYS + 5):
            since = f"'{(END - timedelta(days=days)).isoformat()}'::timestamptz"
            now = _sorted_rows(conn, f"SELECT * FROM report_kernel_drift({since})")
            assert now and now == _sorted_rows(conn, f"SELECT * FROM pg_temp.drift_before({since})")


def test_the_morning_panel_gives_from_the_kept_movers_the_rows_every_case_gives(seeded, reader):
    """The morning panel reads ``report_night_comparison_top`` (every suspected case and each
    latest run's most slowed cases, migration 0017); run against every case's comparison
    instead, the same query gives the same rows, and it never lists more rows than are kept."""
    movers = importlib.import_module("kernelwatch.store.migrations.versions.0017_night_movers")
    assert MORNING_ROWS <= movers.MOVERS
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-fleet"]
    variables = inventory.resolve(dashboard, seeded.request, _runner(reader), None)
    (query,) = [q for q in inventory.dashboard_queries(dashboard) if q.title == MORNING]
    sql = expand(query.sql, seeded.request, variables)
    assert sql.count("FROM report_night_comparison_top\n") == 1
    everything = sql.replace("FROM report_night_comparison_top\n", "FROM report_night_comparison\n")
    shown = reader(sql)[2]
    assert len(shown) > 1 and any(row[1] != "not suspected" for row in shown)
    assert shown == reader(everything)[2]


SERVING_CHOICE = {"deployment": DEPLOYMENT, "gpu_hour_price": "3.5"}


def _serving_rows(seeded, reader, title: str, request: Request | None = None, **choice):
    return _rows_of(reader, "kw-serving", title, request or seeded.request,
                    {**SERVING_CHOICE, **choice})  # fmt: skip


def test_serving_dashboard_shows_the_tpot_step_at_the_commit_that_made_it(seeded, reader):
    p99 = [r["value"] for r in _serving_rows(seeded, reader, "TPOT (ms)")
           if r["metric"] == "p99_tpot_ms"]  # fmt: skip
    assert len(p99) == DAYS
    step = np.median(p99[PLANT_DAY:]) / np.median(p99[:PLANT_DAY])
    assert step == pytest.approx(SERVING_STEP, abs=0.015)
    (change,) = _serving_rows(seeded, reader, "Serving changes")
    assert (change["metric"], change["direction"], change["provisional"]) == (
        "p99_tpot_ms",
        "regression",
        False,
    )
    assert (change["previous_kernel_commit"], change["kernel_commit"]) == (
        sha(PLANT_DAY - 1),
        sha(PLANT_DAY),
    )
    assert change["regression_id"] == seeded.serving_regression
    assert change["state"] == "untriaged"


def test_serving_dashboard_marks_deploys_and_the_kernel_regression_they_shipped(seeded, reader):
    shipped = _serving_rows(seeded, reader, "Kernel regressions each deploy shipped")
    (planted,) = [r for r in shipped if r["regression_id"] == seeded.regression_id]
    # The planted kernel regression went out with the deploy of its culprit (bisected).
    assert planted["kernel_commit"] == planted["commit_sha"] == sha(PLANT_DAY)
    assert planted["repository"] == REPOSITORY
    assert all(r["kind"] != "serving" for r in shipped)
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-serving"]
    variables = inventory.resolve(dashboard, seeded.request, _runner(reader), SERVING_CHOICE)
    marks = {
        q.title: reader(expand(q.sql, seeded.request, variables))[2]
        for q in inventory.dashboard_queries(dashboard)
        if q.kind == "annotation"
    }
    assert len(marks["Kernel commits deployed"]) == DAYS  # a new kernel commit every night
    assert any(f"#{seeded.regression_id}:" in text for _t, text, _tags in
               marks["Kernel regressions shipped"])  # fmt: skip


def test_serving_cost_is_the_gpu_hour_price_over_the_tokens_an_hour_makes(seeded, reader):
    rows = _serving_rows(seeded, reader, "Cost per million output tokens")
    assert len(rows) == DAYS
    last = seeded.serving_throughput[sha(DAYS - 1)]
    # 3.5 a GPU-hour, one GPU: a million tokens take 1e6 / last seconds.
    assert rows[-1]["cost_per_million_tokens"] == pytest.approx(3.5 * 1e6 / (last * 3600))
    unpriced = _serving_rows(seeded, reader, "Cost per million output tokens", gpu_hour_price="")
    assert [r["cost_per_million_tokens"] for r in unpriced] == [None] * DAYS


def test_a_serving_regression_fires_its_own_rule_and_lists_with_its_repository(seeded, reader):
    rules = {spec.uid: spec for spec in alerts.rules(SEEDED)}
    (fired,) = _firing(reader, rules["kw-serving-regression"])
    assert fired["regression_id"] == str(seeded.serving_regression)
    assert fired["deployment"] == DEPLOYMENT and fired["metrics"] == "p99_tpot_ms"
    assert fired["kernels"] == f"{sha(PLANT_DAY - 1)[:12]}..{sha(PLANT_DAY)[:12]}"
    assert fired["explanation"].startswith("no trace either side yet")
    announced = {i["regression_id"] for i in _firing(reader, rules["kw-regression-open"])}
    assert str(seeded.serving_regression) not in announced  # one announcement, not two
    # Its bad kernel commit is the seeded repository's: it is on that fleet overview.
    opened = _panel_rows(seeded, reader, "kw-fleet", "Open regressions")
    (row,) = [r for r in opened if r["regression_id"] == seeded.serving_regression]
    assert row["kind"] == "serving"


def test_a_serving_change_links_to_its_deployment_around_the_step(seeded, reader):
    (dashboard,) = [d for d in catalog.dashboards() if d["uid"] == "kw-serving"]
    panel = _panel("kw-serving", "Serving changes")
    (change,) = _serving_rows(seeded, reader, "Serving changes")
    (link,) = panel["fieldConfig"]["defaults"]["links"]
    url = urlparse(expand_link(link["url"], change))
    assert url.path == "/d/kw-serving/"
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["var-deployment"] == DEPLOYMENT
    window = Request(*(datetime.fromtimestamp(int(query[k]) / 1000, UTC) for k in ("from", "to")))
    assert window.start < change["at"] < window.end
    options = inventory.resolve(dashboard, window, _runner(reader), {"deployment": DEPLOYMENT})
    assert options["deployment"].values == (DEPLOYMENT,)
    around = [r["value"] for r in _serving_rows(seeded, reader, "TPOT (ms)", window)
              if r["metric"] == "p99_tpot_ms"]  # fmt: skip
    # Both levels are in the window: the nights before the step and after it.
    assert min(around) < P99_TPOT_MS * 1.02 and max(around) > P99_TPOT_MS * 1.045
