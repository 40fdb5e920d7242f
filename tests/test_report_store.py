"""Reports from a real store: a nightly history with a planted regression (detected, grouped,
bisected to its culprit) and a PR check's base and head runs; the comparison, the CLI, and
the pages as headless Chromium draws them."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from factories import (
    DEVICE,
    METHOD,
    REPOSITORY,
    SOFTWARE,
    WHEN,
    build,
    commit,
    correctness,
    measurement,
    run_info,
)

from kernelwatch.analysis.bisect_search import Probe, bisect
from kernelwatch.analysis.thresholds import Thresholds
from kernelwatch.analysis.verdict import ABVerdict
from kernelwatch.flows.detection import detect_and_alert
from kernelwatch.harness.records import CaseId, CorrectnessResult, RunInfo, SpeedOfLight
from kernelwatch.report import format as fmt
from kernelwatch.report.compare import comparison_from_runs
from kernelwatch.report.html import write_compare_report, write_nightly_report, write_run_report
from kernelwatch.report.markdown import pr_comment
from kernelwatch.store.bisect_steps import record_bisection
from kernelwatch.store.identity import series_key
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.report_queries import RunNotFound, resolve_run
from kernelwatch.store.runfile import Run
from kernelwatch.store.triage_state import show_regression

NIGHTS, CULPRIT = 35, 20
CASES = (
    CaseId("builtin", "rms_norm", "llm", {"rows": 64, "hidden": 4096}, "fp16"),
    CaseId("builtin", "rms_norm", "llm", {"rows": 128, "hidden": 4096}, "fp16"),
    CaseId("builtin", "rms_norm", "llm", {"rows": 256, "hidden": 4096}, "fp16"),
    CaseId("builtin", "softmax", "llm", {"rows": 128, "cols": 1024}, "fp16"),
)
BASE_NS = (1000.0, 1800.0, 3400.0, 2500.0)
SHAS = [hashlib.sha1(f"commit {i}".encode()).hexdigest() for i in range(NIGHTS)]
PR_HEAD = hashlib.sha1(b"pr head").hexdigest()


def _sha(day: int) -> str:
    return SHAS[min(day, NIGHTS - 1)]


def _measurement(case: CaseId, base_ns: float, level: float, rng: np.random.Generator):
    samples = base_ns * level * np.exp(rng.normal(0.0, 0.004, 40))
    median = float(np.median(samples))
    pct_sol = 100.0 * 0.6 * base_ns / median  # the roofline allows 60 % of the base time
    return measurement(
        case,
        samples,
        sol=SpeedOfLight(
            0.5, 2000.0 * base_ns / median, 5.0, pct_sol, pct_sol, "memory", "datasheet"
        ),
        baseline="torch",
        baseline_median_ns=median * 1.3,
        speedup=1.3,
    )


def _check(case: CaseId, verdict: str = "pass") -> CorrectnessResult:
    reason = "" if verdict == "pass" else "rel error 3.1e-02 over tolerance 1.0e-02"
    return correctness(case, verdict, reason=reason)


def _info(run: int, trigger: str, sha: str, day: int, base: str | None = None) -> RunInfo:
    when = WHEN + timedelta(days=day)
    parents = (_sha(day - 1),) if day else ()
    return run_info(
        when,
        run_id=str(uuid.UUID(int=run)),
        trigger=trigger,
        commit=commit(sha, when, parents=parents, message=f"commit {day}"),
        base_commit=base,
        pool="gpu-h200",
    )


def _level(case: CaseId, day: int) -> float:
    # Commit CULPRIT makes every rms_norm case 8 % slower; softmax does not move.
    return 1.08 if day >= CULPRIT and case.kernel == "rms_norm" else 1.0


def _nightly(day: int, rng: np.random.Generator) -> Run:
    records = [
        _measurement(c, ns, _level(c, day), rng) for c, ns in zip(CASES, BASE_NS, strict=True)
    ]
    info = _info(day + 1, "nightly", _sha(day), day)
    return Run.of(info, [build(), *map(_check, CASES), *records])


def _pr_pair(rng: np.random.Generator) -> tuple[Run, Run]:
    """Base = the last nightly commit; head = a PR that slows the first case by 10 %, speeds
    softmax up by 5 %, starts spilling, and breaks softmax's correctness."""
    base_sha = _sha(NIGHTS - 1)
    change = (1.10, 1.0, 1.0, 0.95)
    base, head = [], []
    for case, ns, factor in zip(CASES, BASE_NS, change, strict=True):
        base.append(_measurement(case, ns, _level(case, NIGHTS), rng))
        head.append(_measurement(case, ns, _level(case, NIGHTS) * factor, rng))
    checks = [_check(c, "fail" if c.kernel == "softmax" else "pass") for c in CASES]
    return (
        Run.of(_info(1001, "pr", base_sha, NIGHTS), [build(), *map(_check, CASES), *base]),
        Run.of(
            _info(1002, "pr", PR_HEAD, NIGHTS, base_sha),
            [build(spill_store_bytes=96, spill_load_bytes=96), *checks, *head],
        ),
    )


def _same(ratio: float) -> ABVerdict:
    return ABVerdict("SAME", ratio, ratio - 0.004, ratio + 0.004, 0.5, 40, 40, None, None, "")


def _bisect_culprit(conn: psycopg.Connection, regression_id: int) -> None:
    """Bisect the regression's range with probes that find commit CULPRIT slower, and store
    the steps and the culprit as the bisect flow does."""
    detail = show_regression(conn, regression_id)
    good, bad = SHAS.index(detail["good_sha"]), SHAS.index(detail["bad_sha"])
    shas = SHAS[good : bad + 1]
    slower = ABVerdict("SLOWER", 1.08, 1.07, 1.09, 1e-9, 40, 40, None, None, "")

    def probe(commit: str, round_: int) -> Probe:
        at_culprit = SHAS.index(commit) >= CULPRIT
        return Probe({"rms_norm": slower if at_culprit else _same(1.0)}, 3.0)

    outcome = bisect(shas, probe, budget_s=600)
    assert outcome.culprit == _sha(CULPRIT), outcome
    record_bisection(
        conn,
        outcome,
        bisect_id=uuid.uuid4(),
        repository=REPOSITORY,
        regression_id=regression_id,
        device=DEVICE,
        series={"rms_norm": series_key(REPOSITORY, CASES[0], DEVICE.name, METHOD)},
        commits={},
    )


@dataclass(frozen=True)
class Seeded:
    url: str
    regression_id: int
    base_run: str
    head_run: str


@pytest.fixture(scope="module")
def seeded(pg_server) -> Seeded:
    """One database per module (the reports only read it): 35 nightlies with the planted
    regression detected and bisected, and a PR check's two runs."""
    name = f"t_report_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch')
    url = pg_server.url(name)
    rng = np.random.default_rng(7)
    base, head = _pr_pair(rng)
    with psycopg.connect(url) as conn:
        ingester = Ingester(conn)
        for run in [*(_nightly(day, rng) for day in range(NIGHTS)), base, head]:
            ingester.ingest(run)
        (regression_id,) = detect_and_alert(conn, REPOSITORY, Thresholds()).opened
        _bisect_culprit(conn, regression_id)
    return Seeded(url, regression_id, base.info.run_id, head.info.run_id)


def test_comparison_judges_each_case_and_finds_static_and_correctness_failures(seeded):
    with psycopg.connect(seeded.url) as conn:
        c = comparison_from_runs(conn, seeded.base_run, seeded.head_run, Thresholds())
    verdicts = {(x.head.kernel, x.head.case_label): x.verdict_name for x in c.cases}
    assert verdicts == {
        ("rms_norm", "rows=64 hidden=4096"): "SLOWER",
        ("rms_norm", "rows=128 hidden=4096"): "SAME",
        ("rms_norm", "rows=256 hidden=4096"): "SAME",
        ("softmax", "cols=1024 rows=128"): "FASTER",
    }
    (slower,) = c.slower
    assert slower.verdict.ci_low < 1.10 < slower.verdict.ci_high
    assert slower.verdict.cycle_verdict == "SLOWER"  # the clocks did not move
    assert [f.rule for f in c.static] == ["spills"]
    assert [(f.kernel, f.verdict) for f in c.correctness_failures] == [("softmax", "fail")]
    assert c.outcome == 1 and c.problem == "" and c.notes == ()
    assert (c.base.commit_sha, c.head.commit_sha) == (_sha(NIGHTS - 1), PR_HEAD)
    assert c.head.device == DEVICE and c.head.software == SOFTWARE
    assert c.methods == ("cuda-events/cold/h1",)

    comment = pr_comment(c, report_link="https://ci.example/report.html")
    assert comment.startswith("<!-- kernelwatch:pr-check outcome=1 -->")
    row = next(line for line in comment.splitlines() if "rows=64 hidden=4096" in line)
    assert fmt.ratio(slower.verdict.ratio) in row
    assert fmt.interval(slower.verdict.ci_low, slower.verdict.ci_high) in row
    assert "starts spilling" in comment and "rel error 3.1e-02" in comment
    assert "https://ci.example/report.html" in comment


def test_a_comparison_with_nothing_in_common_cannot_be_made(seeded):
    with psycopg.connect(seeded.url) as conn:
        nightly = resolve_run(conn, _sha(3))
        c = comparison_from_runs(conn, nightly, nightly, Thresholds())
        assert c.outcome == 0  # a run against itself: every case the same
        with pytest.raises(RunNotFound, match="no stored run"):
            comparison_from_runs(conn, str(uuid.UUID(int=999_999)), nightly, Thresholds())


def test_resolve_run_prefers_the_pr_base_on_the_heads_device(seeded):
    with psycopg.connect(seeded.url) as conn:
        head = resolve_run(conn, PR_HEAD[:10])
        assert head == seeded.head_run
        # The last nightly commit has a nightly run and the PR's base run: the base wins.
        assert resolve_run(conn, _sha(NIGHTS - 1), near=head) == seeded.base_run
        prefix, count = Counter(sha[0] for sha in SHAS).most_common(1)[0]
        with pytest.raises(RunNotFound, match=f"names {count} stored commits"):
            resolve_run(conn, prefix)
        with pytest.raises(RunNotFound, match="neither a run id nor a commit"):
            resolve_run(conn, "main")


def _last_nightly() -> str:
    return str(uuid.UUID(int=NIGHTS))


@pytest.fixture
def report_cli(seeded, kernelwatch_cli, monkeypatch, tmp_path):
    """``kernelwatch report ...`` against the seeded store, with a configuration that says
    where the repository's checkout is."""
    config = tmp_path / "kernelwatch.toml"
    config.write_text(
        '[[repositories]]\nname = "kernels-repo"\nsource = "/src/kernels"\n'
        'suite = "kernels/suite.py"\n'
    )
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", seeded.url)
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    return lambda *args: kernelwatch_cli("report", *args, "--out", str(tmp_path / "out"))


def test_report_cli_writes_each_kind_and_prints_its_path(report_cli, seeded):
    run = report_cli("--run", _last_nightly())
    assert run.returncode == 0, run.stderr
    page = Path(run.stdout.strip()).read_text()
    assert f"git -C /src/kernels checkout --detach {_sha(NIGHTS - 1)} &amp;&amp; " in page
    assert (
        "kernelwatch bench --repo /src/kernels --suite kernels/suite.py --kernel rms_norm" in page
    )

    nightly = report_cli("--nightly")
    assert nightly.returncode == 0, nightly.stderr
    assert Path(nightly.stdout.strip()).name == "nightly-kernels-repo.html"

    # Commit prefixes: the base resolves to the PR's base run, not the nightly of that commit.
    compare = report_cli("--compare", _sha(NIGHTS - 1)[:10], PR_HEAD[:10])
    assert compare.returncode == 0, compare.stderr
    path = Path(compare.stdout.strip())
    assert path.name == f"compare-{_sha(NIGHTS - 1)[:8]}-{PR_HEAD[:8]}.html"
    assert seeded.base_run in path.read_text()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("--run", str(uuid.UUID(int=424242))), 2, "no stored run"),
        (("--run", "deadbeef"), 2, "no stored run of a commit 'deadbeef'"),
        (("--compare", "deadbeef", PR_HEAD), 2, "no stored run of a commit 'deadbeef'"),
        (("--run", "x", "--nightly"), 2, "choose one of"),
        (("--nightly", "--repository", "elsewhere"), 2, "no nightly run of repository"),
        ((), 2, "choose one of"),
    ],
)
def test_report_cli_bad_input_exits_2_with_one_line(report_cli, args, code, message):
    result = report_cli(*args)
    assert result.returncode == code, (result.stdout, result.stderr)
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_report_cli_unreachable_store_exits_1(report_cli, monkeypatch):
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", "postgresql://127.0.0.1:1/kernelwatch")
    result = report_cli("--nightly")
    assert result.returncode == 1 and result.stderr.startswith("error: cannot connect")


# What a person sees: each report opened in headless Chromium (the system's, driven by
# Playwright over the DevTools protocol). Chromium is installed by `./kw test`; without it
# this test fails and says how to get it, since skipping would pass a report nobody saw.
_INK = """async (src) => {
  const img = new Image();
  img.src = src;
  await img.decode();
  const canvas = document.createElement("canvas");
  canvas.width = img.width;
  canvas.height = img.height;
  const g = canvas.getContext("2d");
  g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, img.width, img.height).data;
  let ink = 0;
  const colors = new Set();
  for (let i = 0; i < d.length; i += 4) {
    if (d[i] < 245 || d[i + 1] < 245 || d[i + 2] < 245) ink++;
    colors.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
  }
  return {ink: ink / (img.width * img.height), colors: colors.size, width: img.width};
}"""


def _chromium() -> str:
    binary = os.environ.get("KERNELWATCH_CHROMIUM") or shutil.which("chromium")
    if binary is None:
        pytest.fail(
            "no Chromium to render the report in: run `./kw test` as root (it installs it), "
            "or `apt-get install chromium`, or set KERNELWATCH_CHROMIUM to a Chromium binary",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is missing: pip install -e '.[dev]'", pytrace=False)
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"])
        yield chromium
        chromium.close()


@dataclass
class Opened:
    page: Any
    problems: list[str]
    requests: list[str]

    def count(self, selector: str) -> int:
        return self.page.locator(selector).count()

    def shot(self, name: str) -> dict[str, float]:
        """A full-page screenshot, saved under $KERNELWATCH_SCREENSHOT_DIR when set, and how
        much of it is drawn (share of non-white pixels, distinct colours)."""
        png = self.page.screenshot(full_page=True)
        folder = os.environ.get("KERNELWATCH_SCREENSHOT_DIR")
        if folder:
            Path(folder, name).write_bytes(self.page.screenshot())
        blank = self.page.context.browser.new_page()
        stats = blank.evaluate(_INK, "data:image/png;base64," + base64.b64encode(png).decode())
        blank.close()
        return stats


def _open(browser, path: Path) -> Opened:
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    opened = Opened(page, [], [])
    page.on("console", lambda m: m.type == "error" and opened.problems.append(m.text))
    page.on("pageerror", lambda e: opened.problems.append(str(e)))
    page.on("request", lambda r: opened.requests.append(r.url))
    page.goto(path.as_uri(), wait_until="load")
    return opened


def _drawn(opened: Opened, name: str) -> None:
    """No console error, nothing fetched beyond the file, and a screenshot with content."""
    assert opened.problems == [], opened.problems
    assert all(url.startswith("file://") for url in opened.requests), opened.requests
    stats = opened.shot(name)
    assert stats["width"] == 1280 and 0.02 < stats["ink"] < 0.9 and stats["colors"] > 50, stats


def test_reports_draw_in_headless_chromium(seeded, browser, tmp_path):
    with psycopg.connect(seeded.url) as conn:
        nightly = write_nightly_report(conn, REPOSITORY, tmp_path)
        comparison = comparison_from_runs(conn, seeded.base_run, seeded.head_run, Thresholds())
        compare = write_compare_report(conn, comparison, tmp_path)
        run = write_run_report(conn, _last_nightly(), tmp_path)
        culprit = show_regression(conn, seeded.regression_id)["culprit_sha"]
    assert culprit == _sha(CULPRIT)

    page = _open(browser, nightly)
    # One history chart per regressed series, every nightly a point, the change marked
    # between the last good point and the first bad one, the culprit on its own point.
    assert page.count("svg.chart.history") == 3
    for chart in page.page.locator("svg.chart.history").all():
        points = chart.locator("circle.point")
        assert points.count() == NIGHTS
        xs = [float(x) for x in points.evaluate_all("ps => ps.map(p => p.getAttribute('cx'))")]
        change = float(chart.locator("line.change-point").get_attribute("x1"))
        assert xs[CULPRIT - 2] < change < xs[CULPRIT + 1]
        culprit_x = float(chart.locator("line.culprit").get_attribute("x1"))
        on = chart.locator(f'circle.point[data-commit="{culprit}"]').get_attribute("cx")
        assert culprit_x == pytest.approx(float(on), abs=0.1)
        assert f"culprit {culprit[:8]}" in chart.locator("text.culprit").text_content()
    assert (
        page.count("svg.chart.sol rect.bar") == 2 and page.count("svg.chart.sol circle.case") == 4
    )
    assert page.count("#regressions tbody tr") == 1
    assert "rms_norm: +8." in page.page.locator("#regressions tbody tr").inner_text()
    assert page.count("table.bisect tbody tr") >= 2
    assert "pass 4" in page.page.locator(".verdicts").inner_text()
    _drawn(page, "report-nightly.png")

    page = _open(browser, compare)
    assert page.count("svg.chart.ratios g.ratio") == 2
    assert page.count("svg.chart.ratios g.ratio.slower") == 1
    assert page.count("#cases tbody tr") == 4 and page.count("#static-table tbody tr") == 1
    assert "Regression: 1 case slower" in page.page.locator(".headline").inner_text()
    # The script sorts by a column and filters rows.
    page.page.locator("#cases th", has_text="ratio").click()
    ratios = page.page.locator("#cases tbody tr td:nth-child(5)").evaluate_all(
        "cells => cells.map(c => parseFloat(c.dataset.sort))"
    )
    assert ratios == sorted(ratios) and len(ratios) == 4
    page.page.locator("input[data-table=cases]").fill("softmax")
    assert page.page.locator("#cases tbody tr:not([hidden])").count() == 1
    assert page.page.locator("[data-count-for=cases]").inner_text() == "1 of 4 rows"
    _drawn(page, "report-compare.png")

    page = _open(browser, run)
    assert page.count("#measurements-table tbody tr") == 4
    assert page.count("svg.chart.history") == 3 and page.count("svg.chart.sol") == 1
    _drawn(page, "report-run.png")
