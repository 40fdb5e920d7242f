"""The report's pure parts: comparing two runs' rows, the PR comment and its size limit,
chart geometry, repro commands. Store-backed reports and the browser test are in
test_report_store.py."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from factories import DEVICE, SOFTWARE, WHEN, commit

from kernelwatch.analysis.build_identity import case_key
from kernelwatch.analysis.static_diff import Finding
from kernelwatch.analysis.thresholds import KernelOverride, Thresholds, VerdictConfig
from kernelwatch.harness.records import DeviceInfo
from kernelwatch.report import charts, views
from kernelwatch.report import format as fmt
from kernelwatch.report.compare import Comparison, RunSide, compare_runs, pr_findings
from kernelwatch.report.markdown import GITHUB_LIMIT, merge_verdict, pr_comment
from kernelwatch.report.repro import Source, Target, bench_command
from kernelwatch.store.report_queries import (
    CorrectnessRow,
    MeasurementRow,
    MeasurementSamples,
    RunHeader,
)

DEFAULT = Thresholds()


def _header(sha: str, trigger: str = "pr", device: DeviceInfo = DEVICE) -> RunHeader:
    return RunHeader(
        run_id=f"{sha[:8]}-0000-0000-0000-000000000000", trigger=trigger, repository="repo",
        suite="builtin", commit=commit(sha, message="msg"),
        base_sha=None, pool="gpu-h200", orchestration_id=None, status="ok", started_at=WHEN,
        finished_at=WHEN, device=device, software=SOFTWARE, measurements=0,
        measurement_errors=0, correctness=0, correctness_failed=0, builds=0,
    )  # fmt: skip


def _row(key: str, median: float, status: str = "ok", kernel: str = "rms_norm") -> MeasurementRow:
    return MeasurementRow(
        measurement_id=0, series_key=key, suite="builtin", kernel=kernel, workload="llm",
        params={"rows": int(key.split("-")[-1]), "hidden": 4096}, dtype="fp16",
        method="cuda-events/cold/h1", status=status, reason="" if status == "ok" else "boom",
        n=40, median_ns=median, ci_low_ns=median * 0.99, ci_high_ns=median * 1.01,
        rel_ci_halfwidth=0.01, stop="converged", tflops=1.0, gbps=900.0, pct_sol=60.0,
        bound="memory", peak_source="datasheet", baseline="torch", baseline_median_ns=median,
        speedup=1.0, config="BLOCK=1024,w4,s1", config_source="pinned", throttled_count=0,
    )  # fmt: skip


def _samples(median: float, rng: np.random.Generator, n: int = 40) -> MeasurementSamples:
    values = median * np.exp(rng.normal(0.0, 0.003, n))
    return MeasurementSamples("ok", tuple(values.tolist()), (False,) * n, (1980.0,) * n)


def _side(header: RunHeader, levels: dict[str, float], seed: int, **row_args) -> RunSide:
    rng = np.random.default_rng(seed)
    rows = [_row(key, level, **row_args) for key, level in levels.items()]
    return RunSide(header, rows, {k: _samples(v, rng) for k, v in levels.items()}, [], [])


def _comparison(
    slower: int, faster: int = 0, same: int = 0, thresholds: Thresholds = DEFAULT
) -> Comparison:
    """Head against base with ``slower`` cases 10 % slower, ``faster`` 10 % faster and
    ``same`` unchanged."""
    factors = [1.1] * slower + [0.9] * faster + [1.0] * same
    base = {f"case-{i}": 1000.0 for i in range(len(factors))}
    head = {f"case-{i}": 1000.0 * f for i, f in enumerate(factors)}
    return compare_runs(
        _side(_header("a" * 40), base, 1), _side(_header("b" * 40), head, 2), thresholds
    )


def test_compare_runs_gives_each_common_case_a_verdict():
    c = _comparison(slower=2, faster=1, same=3)
    assert [len(c.slower), len(c.faster), len(c.with_verdict("SAME"))] == [2, 1, 3]
    assert all(x.verdict.ci_low < 1.1 < x.verdict.ci_high for x in c.slower)
    assert c.outcome == 1 and c.problem == "" and c.notes == ()
    assert _comparison(slower=0, faster=2, same=2).outcome == 0


def test_a_per_kernel_margin_override_flips_that_kernels_verdicts():
    wide = {"verdict": {"margin": 0.2}}
    own = _comparison(
        slower=2, thresholds=Thresholds(overrides=(KernelOverride(("rms_*",), wide),))
    )
    assert [x.verdict_name for x in own.cases] == ["SAME", "SAME"] and own.outcome == 0
    assert own.notes == (
        "rms_norm is judged by its own verdict thresholds (margin 0.2; [[thresholds]] in "
        "kernelwatch.toml)",
    )
    other = Thresholds(overrides=(KernelOverride(("softmax",), wide),))
    assert _comparison(slower=2, thresholds=other).outcome == 1


def test_a_failure_the_base_already_had_is_not_blamed_on_the_head():
    """Issue 18: a case erroring identically at base and head made the verdict regression."""

    def check(dtype: str, verdict: str, reason: str = "") -> CorrectnessRow:
        return CorrectnessRow("gelu", "smoke", {"n": 5}, dtype, verdict, reason, None, 1e-3)

    levels = {"case-0": 1000.0}
    broken = check("fp16", "error", "ValueError: input arg type does not match")
    base = replace(_side(_header("a" * 40), levels, 1), correctness=[check("fp32", "pass"), broken])
    head = replace(_side(_header("b" * 40), levels, 2), correctness=[check("fp32", "pass"), broken])
    c = compare_runs(base, head)
    assert c.correctness_failures == () and c.already_failing == (broken,)
    assert c.outcome == 0
    comment = pr_comment(c)
    assert "Already failing at base (not counted)" in comment and "input arg type" in comment
    # A case that newly fails at head still counts, whatever else failed at base.
    worse = replace(head, correctness=[check("fp32", "fail", "rel error 1"), broken])
    assert [f.dtype for f in compare_runs(base, worse).correctness_failures] == ["fp32"]
    assert compare_runs(base, worse).outcome == 1


def test_compare_runs_explains_cases_and_comparisons_it_cannot_judge():
    base = _side(_header("a" * 40), {"c-1": 1000.0, "c-2": 1000.0, "c-3": 1000.0}, 1)
    head = _side(_header("b" * 40), {"c-1": 1000.0, "c-2": 1000.0, "c-4": 1000.0}, 2)
    errored = replace(head.measurements[1], status="error", reason="boom")
    throttled = replace(head.samples["c-1"], throttled=(True,) * 39 + (False,))
    head = replace(
        head,
        measurements=[head.measurements[0], errored, head.measurements[2]],
        samples={**head.samples, "c-1": throttled},
    )
    c = compare_runs(base, head)
    problems = {x.head.series_key: x.problem for x in c.errored}
    assert problems == {
        "c-1": "each side needs at least 2 samples (counted: base 40, head 1)",
        "c-2": "head error: boom",
    }
    assert [m.series_key for m in c.only_base] == ["c-3"]
    assert [m.series_key for m in c.only_head] == ["c-4"]
    assert c.outcome == 2 and "none of the 2 cases in common" in c.problem

    elsewhere = replace(DEVICE, name="NVIDIA B200")
    moved = replace(head, header=_header("b" * 40, device=elsewhere))
    assert "an A/B comparison needs one device" in compare_runs(base, moved).problem
    nightly = replace(base, header=_header("a" * 40, trigger="nightly"))
    other_gpu = replace(head, header=_header("b" * 40, device=replace(DEVICE, uuid="GPU-2")))
    notes = compare_runs(nightly, other_gpu).notes
    assert len(notes) == 2 and "not an interleaved A/B pair" in notes[1]


def test_pr_comment_names_each_regressed_case_with_its_ratio_and_ci():
    c = _comparison(slower=3, faster=1, same=2)
    comment = pr_comment(c, report_link="https://ci.example/r.html")
    assert comment.startswith("<!-- kernelwatch:pr-check outcome=1 -->\n### ❌ kernelwatch:")
    for case in c.slower:
        line = next(x for x in comment.splitlines() if f"| {case.head.case_label} |" in x)
        assert fmt.ratio(case.verdict.ratio) in line
        assert fmt.interval(case.verdict.ci_low, case.verdict.ci_high) in line
    assert "#### Slower (3)" in comment and "#### Faster (1)" in comment
    assert "2 cases the same within ±1.0%" in comment and "not shown" not in comment
    assert "Full report: https://ci.example/r.html" in comment


@pytest.fixture(scope="module")
def thousand() -> Comparison:
    """1,000 slower cases, 200 faster, 300 static regressions (a coarse bootstrap: the
    comment's layout does not depend on its precision)."""
    c = _comparison(
        slower=1000, faster=200, thresholds=Thresholds(verdict=VerdictConfig(resamples=200))
    )
    return replace(c, static=tuple(_finding(i) for i in range(300)))


@pytest.mark.parametrize("limit", [GITHUB_LIMIT, 20_000, 3_000])
def test_pr_comment_with_1000_regressions_fits_the_limit_and_counts_what_it_left_out(
    thousand, limit
):
    comment = pr_comment(thousand, limit=limit)
    assert len(comment) <= limit
    shown = len(re.findall(r"^\| rms_norm \| rows=\d+ hidden=4096 \| fp16 \| 1\.", comment, re.M))
    left = re.search(r"_…and (\d+) more slower cases not shown", comment)
    assert left is not None and shown + int(left.group(1)) == 1000 and shown > 0
    assert "#### Static regressions (300)" in comment and "#### Faster (200)" in comment
    # Every table keeps its first rows: a thousand slower cases do not hide the static ones.
    assert "| gemm | gemm_0 | sm_90a |" in comment
    # The worst cases come first.
    ratios = [float(r) for r in re.findall(r"\| (1\.\d+)x \(", comment)][:shown]
    assert ratios == sorted(ratios, reverse=True)


def test_pr_comment_cut_to_tiny_limits_stays_within_them():
    c = _comparison(slower=50)
    for limit in (0, 10, 100, 400):
        assert len(pr_comment(c, limit=limit)) <= limit


def test_pr_comment_headlines_for_no_regression_and_no_comparison():
    fine = pr_comment(_comparison(slower=0, faster=2, same=1))
    assert "outcome=0" in fine and "✅ kernelwatch: no regression (2 faster)" in fine
    base = _side(_header("a" * 40), {"c-1": 1000.0}, 1)
    head = _side(_header("b" * 40), {"c-2": 1000.0}, 2)
    broken = pr_comment(compare_runs(base, head))
    assert "outcome=2" in broken and "could not compare this PR: the runs have no" in broken


def test_pr_comment_cells_cannot_break_the_table():
    c = _comparison(slower=1)
    weird = replace(c.slower[0].head, kernel="a|b<script>\nc")
    c = replace(c, cases=(replace(c.slower[0], head=weird),))
    row = next(x for x in pr_comment(c).splitlines() if "a\\|b" in x)
    assert "`a\\|b<script> c`" in row and row.count(" | ") == 6


HOSTILE = (
    "@maintainers please merge",
    "[click me](https://evil.example/x)",
    "![pixel](https://evil.example/p.png)",
    "<img src=x onerror=alert(1)>",
    "https://evil.example/autolink",
    "``fence`` @breaker` [x](https://evil.example/f)",
    "see #1 and GH-2",
)


@pytest.mark.parametrize("text", HOSTILE)
def test_pr_comment_markdown_injection_from_kernel_text_is_inert(text):
    c = _comparison(slower=1)
    hostile = replace(c.slower[0].head, kernel=text, params={"p": text}, dtype=text)
    c = replace(c, cases=(replace(c.slower[0], head=hostile),), notes=(text,))
    comment = pr_comment(c)
    for line in comment.splitlines()[1:]:
        if text.split()[0] in line:
            # Every occurrence sits inside an inline code span, where nothing is rendered.
            spans = re.findall(r"(`+) ?(.*?) ?\1", line)
            outside = re.sub(r"(`+).*?\1", "", line)
            assert spans and "@" not in outside and "](" not in outside and "<" not in outside
            assert "://" not in outside and "#1" not in outside


def test_pr_check_error_comment_quotes_suite_errors_inertly():
    from kernelwatch.report.markdown import error_comment

    comment = error_comment("could not import suite: @team ![x](https://e/x.png) <b>")
    assert comment.splitlines()[0] == "<!-- kernelwatch:pr-check outcome=2 -->"
    body = comment.splitlines()[-1]
    assert body.startswith("`") and body.endswith("`")


def _finding(i: int) -> Finding:
    return Finding(
        "spills", "gemm", f"gemm_{i}", "fp16", "w4", "m=64", "sm_90a", "0 B", "64 B", "x"
    )


def test_nice_ticks_are_round_and_cover_the_range():
    assert charts.nice_ticks(0.0, 100.0, 5) == [0, 20, 40, 60, 80, 100]
    assert charts.nice_ticks(1795.0, 1952.0, 4) == [1800, 1850, 1900, 1950]
    assert charts.nice_ticks(0.95, 1.12, 6) == pytest.approx([0.95, 1.0, 1.05, 1.1])
    assert charts.nice_ticks(3.0, 3.0) == [3.0]


def _history_row(i: int, median: float, change: float | None = None, regression=None) -> dict:
    return {
        "median_ns": median, "ci_low_ns": median * 0.99, "ci_high_ns": median * 1.01,
        "commit_sha": f"{i:x}" * 40, "measured_at": datetime(2026, 6, 1 + i, tzinfo=UTC),
        "change_point_id": None if change is None else i, "change_rel": change,
        "regression_id": regression,
    }  # fmt: skip


def test_history_chart_marks_the_change_and_a_culprit_between_points():
    rows = [_history_row(i, 1000.0) for i in range(6)]
    rows += [_history_row(6, 1100.0, change=0.1, regression=7)]
    rows += [_history_row(i, 1100.0) for i in range(7, 12)]
    svg, said = views.history_chart(rows, 7, culprit_sha="c" * 40)
    assert said == "+10.0% at 66666666"
    cx = [float(x) for x in re.findall(r'<circle class="point" cx="([\d.]+)"', svg)]
    assert len(cx) == 12
    change = float(re.search(r'class="marker change-point" x1="([\d.]+)"', svg).group(1))
    culprit = float(re.search(r'class="marker culprit" x1="([\d.]+)"', svg).group(1))
    # The culprit was never measured: it lies between the last good and first bad point.
    assert cx[5] < change == culprit < cx[6]
    assert svg.count('class="level"') == 2
    measured, _ = views.history_chart(rows, 7, culprit_sha="6" * 40)
    on = float(re.search(r'class="marker culprit" x1="([\d.]+)"', measured).group(1))
    assert on == pytest.approx(cx[6])


def test_charts_escape_every_label():
    svg = charts.sol_chart([("<b>k</b>", [charts.SolCase("a&b", 50.0, "memory")])])
    assert "<b>" not in svg and "&lt;b&gt;k&lt;/b&gt;" in svg and "a&amp;b" in svg


def test_sol_and_ratio_charts_only_draw_what_they_know():
    rows = [_row("c-1", 1000.0), replace(_row("c-2", 1000.0), pct_sol=None)]
    assert views.sol_svg([replace(r, pct_sol=None) for r in rows]) is None
    assert views.sol_svg(rows).count('class="case"') == 1
    assert views.ratio_svg(_comparison(slower=0, same=3)) == (None, 0)
    svg, left_off = views.ratio_svg(_comparison(slower=views.RATIO_ROWS + 5))
    assert svg.count('class="ratio slower"') == views.RATIO_ROWS and left_off == 5


def test_repro_commands_check_out_the_commit_and_time_the_row():
    target = Target("kernels", "builtin", "ab" * 20, "rms_norm", "llm", "fp16")
    local = bench_command(target, Source("/src/my kernels", "suite.py"))
    assert local == (
        f"git -C '/src/my kernels' checkout --detach {'ab' * 20} && kernelwatch bench "
        "--repo '/src/my kernels' --suite suite.py --kernel rms_norm --workload llm --dtype fp16"
    )
    remote = bench_command(target, Source("https://git.example/k.git", "pkg.suite"))
    assert remote.startswith("git clone https://git.example/k.git kw-repro && git -C kw-repro ")
    assert "--repo kernels --suite builtin" in bench_command(target)
    assert "checkout" not in bench_command(replace(target, sha=None))


def test_a_report_is_linked_under_its_served_url_or_not_at_all(tmp_path):
    """A PR comment's link: the report under ``[run] report_url`` where the report folder is
    served, nothing (the comment then names the command) without one or outside it."""
    from kernelwatch.flows.reporting import report_url

    report = tmp_path / "reports" / "pr" / "compare.html"
    assert report_url(report, tmp_path / "reports", "https://kw.example/r/") == (
        "https://kw.example/r/pr/compare.html"
    )
    assert report_url(report, tmp_path / "reports", "") is None
    assert report_url(tmp_path / "elsewhere.html", tmp_path / "reports", "https://x/") is None


def test_an_ambiguous_case_is_said_in_the_headline_never_under_no_regression():
    """A case whose interval straddles the margin was never settled: a green "no regression"
    above it read as a verdict nobody measured."""
    base = {"case-0": 1000.0, "case-1": 1000.0}
    head = {"case-0": 1010.0, "case-1": 1000.0}  # the first exactly at the 1% margin
    c = compare_runs(_side(_header("a" * 40), base, 1), _side(_header("b" * 40), head, 2))
    assert [x.verdict_name for x in c.cases] == ["AMBIGUOUS", "SAME"]
    marker, headline = pr_comment(c).splitlines()[:2]
    assert "no regression" not in headline and "✅" not in headline
    assert headline == "### ⚠️ kernelwatch: 1 case inconclusive, none slower"
    # its own outcome, which the workflow exits with: never 0, never a regression's 1
    assert c.outcome == 3 and marker == "<!-- kernelwatch:pr-check outcome=3 -->"


def test_identical_builds_are_a_verdict_of_their_own_and_no_kernel_changed_is_said():
    """Issue 48: the head's passing cases whose build was identical at both sides are listed
    as not timed, counted in the headline; with nothing timed that is "no kernel changed", not
    "the runs have no measured case in common"; a failing case is never called identical."""

    def check(kernel: str, verdict: str = "pass") -> CorrectnessRow:
        return CorrectnessRow(kernel, "smoke", {"n": 5}, "fp16", verdict, "", None, 1e-3)

    same = {case_key(k, "fp16", {"n": 5}) for k in ("gelu", "silu", "broken")}
    checks = [check("gelu"), check("silu"), check("broken", "fail")]
    base = replace(_side(_header("a" * 40), {}, 1), correctness=[*checks[:2], check("broken")])
    head = replace(_side(_header("b" * 40), {}, 2), correctness=checks)
    nothing = compare_runs(base, head, identical=same)
    assert [c.kernel for c in nothing.untimed] == ["gelu", "silu"] and nothing.problem == ""
    assert nothing.outcome == 1  # the failure at head still counts
    clean = compare_runs(base, replace(head, correctness=checks[:2]), identical=same)
    assert clean.outcome == 0
    assert merge_verdict(clean) == "no kernel changed: 2 cases identical build: not timed"
    assert "2 not timed (identical build)" in pr_comment(clean)
    assert [f.verdict for f in pr_findings(clean)] == ["IDENTICAL", "IDENTICAL"]
    timed = _comparison(slower=0, same=1)
    timed = replace(timed, untimed=clean.untimed)
    assert merge_verdict(timed) == "no regression; 2 cases identical build: not timed"
