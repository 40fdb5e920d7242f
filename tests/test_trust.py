"""The self-check's judgement on hand-made numbers: each question's rule at exactly its
threshold (passing there, failing just past it), each part of a compound rule on its own,
the numbers each one-line verdict quotes, and the thresholds against docs/TIMING.md."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest
from factories import measurement

from kernelwatch.analysis import trust
from kernelwatch.analysis.trust import FAIL, INCOMPLETE, PASS, SKIPPED
from kernelwatch.harness.records import LaunchConfig

TIMING_DOC = Path(__file__).resolve().parent.parent / "docs" / "TIMING.md"


def _finding(key: str, stage: dict[str, Any], **others: Any) -> trust.Finding:
    return next(f for f in trust.judge({key: stage, **others}) if f.key == key)


def _doc_row(question: str) -> str:
    rows = [line for line in TIMING_DOC.read_text().splitlines() if line.startswith("| ")]
    return next(row for row in rows if row.startswith(f"| {question} |"))


def test_the_thresholds_are_the_figures_docs_timing_states():
    low, high = trust.TORCH_BENCH_BAND
    copy_low, copy_high = trust.SOL_OF_COPY
    documented = {
        "A/A false regressions": [
            f"{100 * trust.AA_MAX_NOT_SAME:g}% rate",
            f"under {100 * trust.AA_SIGNIFICANCE:g}%",
        ],
        "CI coverage": [f"≥ {100 * trust.COVERAGE_MIN:g}%"],
        "agreement": [
            f"≥ {trust.TORCH_BENCH_MIN_NS / 1e3:g} µs",
            f"do_bench within ±{100 * trust.DO_BENCH_BAND:g}% plus two event steps",
            f"torch.utils.benchmark within {low:g}\N{EN DASH}{high:g}",
        ],
        "%SOL": [
            f"{100 * copy_low:g}\N{EN DASH}{100 * copy_high:g}% of the copy ceiling, "
            f"≤ {100 * trust.SOL_OF_DATASHEET_MAX:g}% of the datasheet"
        ],
        "clocks and throttling": [f"≤ {100 * trust.THROTTLED_MAX:g}% throttled"],
        "ncu": [f"within ±{100 * trust.NCU_BAND:g}%"],
    }
    for question, figures in documented.items():
        row = _doc_row(question)
        for figure in figures:
            assert figure in row, (question, figure)
    # The literal coverage reading's expectation, 2 Phi(1.96 / sqrt 2) - 1.
    assert f"≈ {100 * trust.PAIRED_COVERAGE:.0f}%" in TIMING_DOC.read_text()
    assert abs(trust.PAIRED_COVERAGE - 0.8342) < 1e-4
    assert "Events resolve about 0.5 µs" in TIMING_DOC.read_text()
    assert trust.EVENT_STEP_NS == 500.0


def test_findings_are_immutable():
    finding = trust.judge({})[0]
    assert (finding.key, finding.status, finding.line) == ("aa", INCOMPLETE, "not run")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.status = PASS  # type: ignore[misc]


# -- A/A ----------------------------------------------------------------------------------


def _aa_case(i: int, verdict: str | None, status: str = "ok") -> dict[str, Any]:
    return {"kernel": "k", "case": f"n={i}", "status": status, "verdict": verdict,
            "reason": "child died" if status == "error" else "", "ratio": 1.0123,
            "ci_low": 1.005, "ci_high": 1.02}  # fmt: skip


def _aa(verdicts: list[str | None], planned: int | None = None, errors: int = 0):
    cases = [_aa_case(i, v) for i, v in enumerate(verdicts)]
    cases += [_aa_case(len(cases) + i, None, "error") for i in range(errors)]
    return {"planned": len(cases) if planned is None else planned, "cases": cases}


# Each question's (stage, status) at its rule's edges; judged together at the end.
# A/A: at most the count a 0.5% rate reaches with p >= 5% (3 of 200, 1 of 30, 0 of 10);
# errors fail; the deadline leaves it open.
AA_EDGES = [
    (_aa(["SAME"] * 197 + ["SLOWER"] * 3), PASS),  # 3 of 200: at the limit
    (_aa(["SAME"] * 196 + ["FASTER"] * 4), FAIL),  # just past it
    (_aa(["SAME"] * 196 + ["SLOWER"] * 3 + ["AMBIGUOUS"]), FAIL),  # any but SAME counts
    (_aa(["SAME"] * 29 + ["AMBIGUOUS"]), PASS),  # 1 of 30: what the rate gives 14% of runs
    (_aa(["SAME"] * 28 + ["AMBIGUOUS"] * 2), FAIL),
    (_aa(["SAME"] * 9 + ["SLOWER"]), FAIL),  # 1 of 10: p = 4.9%
    (_aa(["SAME"] * 197 + ["SLOWER"] * 3, planned=300), INCOMPLETE),  # the deadline
    (_aa(["SAME"] * 196 + ["SLOWER"] * 4, planned=300), FAIL),  # failed before the deadline
    (_aa(["SAME"] * 10, errors=1), FAIL),  # an errored case fails all by itself
    (_aa([None, None], planned=2), INCOMPLETE),  # nothing timed (unsupported)
    (_aa([], planned=5), INCOMPLETE),
]


def test_an_a_a_pair_with_too_few_samples_is_an_incomplete_line_not_a_crash():
    """A side left with one unthrottled sample cannot be judged: the pair says so, and the
    question stays open however many other pairs were SAME."""
    base = measurement(samples_ns=(1000.0, 1010.0, 990.0), throttled=(True, True, False))
    # Each side's config as its own record holds it: equal, never the same object.
    base = dataclasses.replace(base, config=LaunchConfig({"BLOCK": 64}, 4, 2))
    head = dataclasses.replace(measurement(), config=LaunchConfig({"BLOCK": 64}, 4, 2))
    row = trust.pair_verdict(base, head)
    assert row["verdict"] is None and row["same_config"] is True
    assert "at least 2 samples" in row["verdict_reason"]
    assert (
        trust.pair_verdict(
            base, dataclasses.replace(head, config=LaunchConfig({"BLOCK": 128}, 4, 2))
        )["same_config"]
        is False
    )
    stage = _aa(["SAME"] * 10)
    stage["cases"].append({**_aa_case(10, None), **row})
    stage["planned"] = 11
    finding = _finding("aa", stage)
    assert finding.status == INCOMPLETE
    assert "1 pair(s) too few samples to judge" in finding.line
    assert any("n=10: not judged" in line for line in finding.details)


def test_the_a_a_line_quotes_its_counts_and_target_and_each_odd_case():
    finding = _finding("aa", _aa(["SAME"] * 196 + ["SLOWER", "FASTER", "AMBIGUOUS"], planned=250))
    assert finding.line == (
        "3 of 199 pairs other than SAME (2 SLOWER/FASTER), 199 of 250 planned; "
        "pass <= 3 of 199 (a 0.5% rate, p >= 0.05) (the deadline stopped the rest)"
    )
    assert finding.details == (
        "k n=196: SLOWER (B/A 1.0123, 95% CI 1.0050-1.0200)",
        "k n=197: FASTER (B/A 1.0123, 95% CI 1.0050-1.0200)",
        "k n=198: AMBIGUOUS (B/A 1.0123, 95% CI 1.0050-1.0200)",
    )
    errored = _finding("aa", _aa(["SAME", "SAME"], errors=1))
    assert errored.line == (
        "0 of 2 pairs other than SAME (0 SLOWER/FASTER), 2 of 3 planned; "
        "pass <= 0 of 2 (a 0.5% rate, p >= 0.05); 1 cases errored"
    )
    assert errored.details == ("k n=2: error: child died",)
    assert _finding("aa", _aa([], planned=3)).line.startswith("0 of 0 pairs other than SAME")
    processes = _finding("aa", {**_aa(["SAME"] * 4), "processes": 4})
    assert "(0 SLOWER/FASTER) from 4 processes," in processes.line


@pytest.mark.parametrize(("timed", "allowed"), [(0, 0), (10, 0), (11, 1), (30, 1), (100, 2),
                                                 (200, 3), (500, 5)])  # fmt: skip
def test_the_a_a_count_is_the_largest_a_half_percent_rate_reaches_one_run_in_twenty(timed, allowed):
    assert trust.aa_allowed(timed) == allowed

    def at_least(k: int) -> float:
        below = sum(math.comb(timed, i) * 0.005**i * 0.995 ** (timed - i) for i in range(k))
        return 1 - below

    assert at_least(allowed) >= 0.05 and at_least(allowed + 1) < 0.05


# -- CI coverage ---------------------------------------------------------------------------


def _repeat(median: float, low: float, high: float) -> dict[str, float]:
    return {"median_ns": median, "ci_low_ns": low, "ci_high_ns": high}


def _around(median: float, half: float) -> dict[str, float]:
    return _repeat(median, median - half, median + half)


FIRST = _around(100.0, 10.0)  # the first run's CI: 90-110


@pytest.mark.parametrize(
    ("repeats", "counts"),
    [
        # Each CI against the other two's median (100): at its low edge, at its high edge,
        # a hair past both.
        (
            [
                _repeat(100.0, 100.0, 101.0),
                _repeat(100.0, 99.0, 100.0),
                _repeat(100.0, 100.5, 101.0),
            ],
            (2, 3, 2, 2),
        ),
        (
            [_repeat(100.0, 99.0, 99.5), _repeat(100.0, 99.0, 100.0), _repeat(100.0, 100.0, 101.0)],
            (2, 3, 0, 2),
        ),
        # The first run's CI against the later medians: both edges in, a step past each out.
        (
            [
                FIRST,
                _around(90.0, 1.0),
                _around(110.0, 1.0),
                _around(89.0, 1.0),
                _around(111.0, 1.0),
            ],
            (1, 5, 2, 4),
        ),
        # Two repeats: one other median is no consensus; a repeat that failed is skipped.
        ([FIRST, _around(100.0, 1.0)], (0, 0, 1, 1)),
        ([FIRST, None, _around(100.0, 1.0)], (0, 0, 1, 1)),
        ([FIRST, None, _around(100.0, 1.0), _around(100.0, 1.0)], (3, 3, 2, 2)),
        ([FIRST] * 4, (4, 4, 3, 3)),
        ([FIRST], (0, 0, 0, 0)),
        ([None, None], (0, 0, 0, 0)),
    ],
)
def test_coverage_counts_at_the_ci_edges(repeats, counts):
    assert trust.coverage_counts([{"repeats": repeats}]) == counts


def test_coverage_counts_add_up_over_cases():
    cases = [{"repeats": [FIRST] * 3}, {"repeats": [FIRST] * 4}, {"repeats": [FIRST] * 2}]
    assert trust.coverage_counts(cases) == (7, 7, 6, 6)


def _coverage(held: int, total: int) -> dict[str, Any]:
    """Cases of four repeats (medians all 100) of which ``held`` CIs hold 100."""
    repeats = [_repeat(100.0, 99.0, 101.0)] * held + [_repeat(100.0, 101.0, 102.0)] * (total - held)
    cases = [repeats[i : i + 4] for i in range(0, total, 4)]
    return {"cases": [{"kernel": "k", "case": f"n={i}", "repeats": r} for i, r in
                      enumerate(cases)]}  # fmt: skip


# Coverage: at least 85% of the countable repeats' CIs hold the others' median.
COVERAGE_EDGES = [
    (_coverage(17, 20), PASS),  # 85%: at the limit
    (_coverage(16, 20), FAIL),
    (_coverage(20, 20), PASS),
    (_coverage(0, 4), FAIL),
    ({"cases": []}, INCOMPLETE),
    ({"cases": [{"kernel": "k", "case": "n=1", "repeats": [FIRST, FIRST]}]}, INCOMPLETE),
]


def test_the_coverage_line_quotes_both_readings_and_each_case_s_medians():
    repeats = [_around(1234.5, 100.0), None, _around(1250.0, 10.0), _around(1400.0, 10.0)]
    finding = _finding("coverage", {"cases": [{"kernel": "k", "case": "n=1", "repeats": repeats}]})
    assert finding.line == (
        "1/3 (33.3%) repeats' 95% CIs hold the median of the other repeats; "
        "target close to 95%, pass >= 85%"
    )
    assert finding.details == (
        "k n=1: medians 1.23, -, 1.25, 1.40 us",
        "the literal reading, repeats' medians inside the first run's 95% CI: 1/2 (50.0%); "
        "83% is what exact CIs give two independent runs (their difference has twice the "
        "variance)",
    )


# -- agreement ----------------------------------------------------------------------------


def _row(ours: float | None, do_bench: float | None = None, torch_ns: float | None = None,
         errors: tuple[str, ...] = (), name: str = "k") -> dict[str, Any]:  # fmt: skip
    timed = None if ours is None else {"median_ns": ours}
    return {"kernel": name, "case": "n=1", "ours": timed, "do_bench_ns": do_bench,
            "torch_benchmark_ns": torch_ns, "errors": list(errors)}  # fmt: skip


def _agreement(*rows: dict[str, Any], step: float | None = None, granularity: bool = True):
    measured = {**_granularity(2000.0, 0.125), "smallest_step_ns": step}
    others = {"granularity": measured} if granularity else {}
    return _finding("agreement", {"rows": list(rows)}, **others)


@pytest.mark.parametrize(
    ("do_bench", "step", "status"),
    [
        # 10 us with 500 ns steps: 5% + 2 x 5% = 15% either side.
        (11_500.0, 500.0, PASS),
        (8_500.0, 500.0, PASS),
        (11_501.0, 500.0, FAIL),
        (8_499.0, 500.0, FAIL),
        # The measured step, 250 ns: 10%.
        (9_000.0, 250.0, PASS),
        (8_999.0, 250.0, FAIL),
        (11_100.0, 250.0, FAIL),
        # No measured step: the nominal 500 ns.
        (11_500.0, None, PASS),
        (11_501.0, None, FAIL),
    ],
)
def test_do_bench_agrees_within_its_band_of_share_plus_two_steps(do_bench, step, status):
    assert _agreement(_row(10_000.0, do_bench), step=step).status == status


def test_without_a_granularity_stage_the_step_is_the_nominal_one():
    assert _agreement(_row(10_000.0, 11_500.0), granularity=False).status == PASS
    assert _agreement(_row(10_000.0, 11_501.0), granularity=False).status == FAIL


@pytest.mark.parametrize(
    ("ours", "torch_ns", "status"),
    [
        (100_000.0, 85_000.0, PASS),  # 100 us is judged: the band's edges pass
        (100_000.0, 105_000.0, PASS),
        (100_000.0, 100_000.0, PASS),
        (100_000.0, 84_999.0, FAIL),
        (100_000.0, 105_001.0, FAIL),
        (200_000.0, 169_000.0, FAIL),
        (99_999.0, 50_000.0, PASS),  # under 100 us: launch-bound, not judged
        (99_999.0, 150_000.0, PASS),
    ],
)
def test_torch_benchmark_is_judged_from_100_us_within_its_band(ours, torch_ns, status):
    assert _agreement(_row(ours, ours, torch_ns)).status == status


def test_the_agreement_line_counts_each_failure_and_the_details_mark_them():
    finding = _agreement(
        _row(200_000.0, 240_000.0, 200_000.0),
        _row(50_000.0, 50_000.0, 10_000.0),
        _row(None, name="k2", errors=("torch_benchmark_ns: RuntimeError: boom",)),
        step=500.0,
    )
    assert finding.status == FAIL
    assert finding.line == "3 cases, 3 outside their band"
    assert finding.details == (
        "k n=1: do_bench/ours 1.200 (band +-5.5%) FAIL; torch.utils.benchmark/ours 1.000 "
        "(band 0.85-1.05)",
        "k n=1: do_bench/ours 1.000 (band +-7.0%); torch.utils.benchmark/ours 0.200 "
        "(not judged: under 100 us, launch-bound)",
        "k2 n=1: error torch_benchmark_ns: RuntimeError: boom FAIL; ours: not measured FAIL",
    )


def test_agreement_without_do_bench_is_incomplete_unless_something_failed():
    torch_only = _agreement(_row(200_000.0, None, 200_000.0))
    assert torch_only.status == INCOMPLETE
    assert torch_only.line == "1 cases, 0 outside their band; do_bench could not run here"
    assert _agreement(_row(200_000.0, None, 100_000.0)).status == FAIL
    assert _agreement(_row(200_000.0, None, None, errors=("do_bench_ns: boom",))).status == FAIL
    assert _agreement().status == INCOMPLETE


# -- %SOL ---------------------------------------------------------------------------------


def _sol(gbps: float, copy: float | None, sheet: float | None = None) -> dict[str, Any]:
    return {"kernel": "silu_and_mul", "case": "tokens=16384", "gbps": gbps, "copy_gbps": copy,
            "datasheet_gbps": sheet}  # fmt: skip


# %SOL: 50-105% of the copy ceiling and at most 100% of the datasheet peak.
SOL_EDGES = [
    (_sol(2150.0, 4300.0), PASS),  # 50% of the copy ceiling
    (_sol(2149.0, 4300.0), FAIL),
    (_sol(4515.0, 4300.0), PASS),  # 105%
    (_sol(4516.0, 4300.0), FAIL),
    (_sol(4800.0, 4800.0, 4800.0), PASS),  # 100% of the datasheet
    (_sol(4801.0, 4800.0, 4800.0), FAIL),  # under 105% of the copy, over the datasheet
    (_sol(2149.0, 4300.0, 4800.0), FAIL),  # under the datasheet, under 50% of the copy
    (_sol(4515.0, 4300.0, None), PASS),  # no datasheet figure: the copy ceiling alone
    (_sol(4515.0, 4300.0, 0.0), PASS),
    (_sol(4000.0, None, 4800.0), INCOMPLETE),
    (_sol(4000.0, 0.0, 4800.0), INCOMPLETE),
    ({"skipped": "no case of 1 GiB on this device"}, INCOMPLETE),
]


def test_the_sol_line_quotes_both_shares_and_the_band():
    assert _finding("sol", _sol(3333.0, 4000.0, 4800.0)).line == (
        "silu_and_mul tokens=16384: 3333 GB/s; 83.3% of the measured copy ceiling (4000 GB/s); "
        "69.4% of the datasheet HBM peak (4800 GB/s); pass 50-105% of the copy ceiling"
    )
    missing = _finding("sol", _sol(3333.0, None))
    assert missing.line == (
        "silu_and_mul tokens=16384: 3333 GB/s; pass 50-105% of the copy ceiling; "
        "no measured copy ceiling"
    )
    skipped = _finding("sol", {"skipped": "no case of 1 GiB on this device"})
    assert skipped.line == "no case of 1 GiB on this device"


# -- event granularity ----------------------------------------------------------------------


def _granularity(median: float, rel: float, quantum: float = 500.0) -> dict[str, Any]:
    summary = {"median_ns": median, "rel_ci_halfwidth": rel, "stop": "resolution"}
    return {"kernel": "k", "case": "n=1", "samples": 200, "distinct": 2,
            "smallest_step_ns": quantum, "quantum_ns": quantum, "summary": summary}  # fmt: skip


# Granularity: the CI is at least half a step wide either side.
GRANULARITY_EDGES = [
    (_granularity(2000.0, 0.125), PASS),  # +-250 ns: half a 500 ns step
    (_granularity(1062.0, 250.0 / 1062.0), PASS),  # 249.99999999999997: rounding only
    (_granularity(2000.0, 0.1249), FAIL),
    (_granularity(2000.0, 0.0), FAIL),
    (_granularity(2000.0, 0.1, quantum=400.0), PASS),
    (_granularity(2000.0, 0.0999, quantum=400.0), FAIL),
]


def test_the_granularity_line_quotes_the_step_and_the_statistic():
    assert _finding("granularity", _granularity(2000.0, 0.125)).line == (
        "k n=1: 2 distinct values in 200 samples, smallest step 500 ns; median 2.00 us, "
        "CI +-250 ns, stop resolution"
    )
    unresolved = {**_granularity(2000.0, 0.125), "smallest_step_ns": None, "summary": None}
    finding = _finding("granularity", unresolved)
    assert finding.status == INCOMPLETE
    assert finding.line == (
        "k n=1: 2 distinct values in 200 samples, smallest step -; no statistic"
    )


# -- clocks -------------------------------------------------------------------------------


def _clocks(samples: int, throttled: int, **fields: Any) -> dict[str, Any]:
    return {"samples": samples, "throttled": throttled, "reasons": {}, "max_sm_mhz": 1980.0,
            "median_sm_mhz": 1975.0, **fields}  # fmt: skip


# Clocks: at most 5% of samples throttled, judged only with the maximum SM clock known.
CLOCKS_EDGES = [
    (_clocks(100, 5), PASS),  # 5%: at the limit
    (_clocks(100, 6), FAIL),
    (_clocks(100, 0), PASS),
    (_clocks(0, 0), INCOMPLETE),
    (_clocks(100, 0, max_sm_mhz=None), INCOMPLETE),
    (_clocks(100, 50, max_sm_mhz=None), INCOMPLETE),
]


def test_the_clocks_line_and_details_quote_what_nvml_said():
    policy = {"power_limit_w": 700.0, "persistence_mode": True, "applications_sm_mhz": 1755.0,
              "default_applications_sm_mhz": 1980}  # fmt: skip
    stage = _clocks(100, 5, policy=policy, locked_reason_seen=True,
                    reasons={"sw_power_cap": 3, "hw_slowdown": 1})  # fmt: skip
    finding = _finding("clocks", stage)
    assert finding.line == (
        "5/100 (5.0%) samples throttled (SM clock under 75% of max); pass <= 5%"
    )
    assert finding.details == (
        "SM clock median 1975 MHz of max 1980 MHz",
        "clock-event reasons seen (samples): hw_slowdown 1, sw_power_cap 3",
        "power limit 700 W, persistence mode on",
        "clocks locked: yes (applications-clocks reason seen); applications SM clock 1755 of "
        "default 1980 MHz",
    )
    unknown = _finding("clocks", _clocks(0, 0, median_sm_mhz=None, max_sm_mhz=None, policy=None))
    assert unknown.details == (
        "SM clock median unknown of max unknown",
        "clock-event reasons seen (samples): none",
        "power limit unknown, persistence mode unknown",
        "clocks locked: unknown",
    )
    no_nvml = _finding("clocks", _clocks(100, 0, max_sm_mhz=None))
    assert no_nvml.line.endswith("pass <= 5%; the maximum SM clock is unknown (no NVML)")


# -- correctness --------------------------------------------------------------------------

CUDA = "silu_and_mul_cuda"


def _check(kernel: str, verdict: str) -> dict[str, Any]:
    reason = "" if verdict == "pass" else "max rel error 0.3"
    return {"kernel": kernel, "case": "n=64", "dtype": "bf16", "verdict": verdict,
            "reason": reason}  # fmt: skip


def _correctness(checks: list[tuple[str, str]], planned: int | None = None) -> dict[str, Any]:
    cases = [_check(kernel, verdict) for kernel, verdict in checks]
    stage = {"dtype": "bf16", "cuda_kernels": [CUDA], "cases": cases,
             "planned": len(cases) if planned is None else planned}  # fmt: skip
    # The records come from the check child as JSON, and so does every string in them.
    return json.loads(json.dumps(stage))


@pytest.mark.parametrize(
    ("stage", "status", "line"),
    [
        (_correctness([("rms_norm", "pass"), (CUDA, "pass")]), PASS,
         "2/2 (100.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass"),
        (_correctness([("rms_norm", "fail"), ("gemm", "pass"), (CUDA, "pass")]), FAIL,
         "2/3 (66.7%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass"),
        (_correctness([("rms_norm", "pass"), (CUDA, "unsupported")]), FAIL,
         "1/2 (50.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 0/1 pass"),
        (_correctness([("rms_norm", "pass"), (CUDA, "error")]), FAIL,
         "1/2 (50.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 0/1 pass"),
        (_correctness([("rms_norm", "pass"), (CUDA, "pass"), (CUDA, "fail")]), FAIL,
         "2/3 (66.7%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/2 pass"),
        (_correctness([("rms_norm", "pass")]), FAIL,
         "1/1 (100.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): not run"),
        (_correctness([]), FAIL, "0/0 bf16 cases pass; CUDA C++ (silu_and_mul_cuda): not run"),
        (_correctness([("rms_norm", "fail")], planned=2), INCOMPLETE,
         "0/1 (0.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): not run "
         "(the deadline stopped the rest)"),
    ],
)  # fmt: skip
def test_correctness_needs_every_case_and_the_cuda_launch(stage, status, line):
    finding = _finding("correctness", stage)
    assert (finding.status, finding.line) == (status, line)


CUTE = "silu_and_mul_cute"


def _with_cute(checks: list[tuple[str, str]], dsl: str) -> dict[str, Any]:
    """A correctness stage with a CuTe DSL kernel, the DSL installed (its version) or
    ``"absent"``."""
    stage = {**_correctness(checks), "cute_kernels": [CUTE], "cute_dsl": dsl}
    return json.loads(json.dumps(stage))  # as the report holds it: no string is a literal


@pytest.mark.parametrize(
    ("stage", "status", "line"),
    [
        (_with_cute([("rms_norm", "pass"), (CUDA, "pass"), (CUTE, "pass")], "4.8.1"), PASS,
         "3/3 (100.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass; "
         "CuTe DSL (silu_and_mul_cute): 1/1 pass"),
        (_with_cute([("rms_norm", "pass"), (CUDA, "pass"), (CUTE, "fail")], "4.8.1"), FAIL,
         "2/3 (66.7%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass; "
         "CuTe DSL (silu_and_mul_cute): 0/1 pass"),
        (_with_cute([("rms_norm", "pass"), (CUDA, "pass")], "4.8.1"), FAIL,
         "2/2 (100.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass; "
         "CuTe DSL (silu_and_mul_cute): not run"),
        # Without the optional DSL its cases are unsupported: said, neither passed nor failed.
        (_with_cute([("rms_norm", "pass"), (CUDA, "pass"), (CUTE, "unsupported")], "absent"),
         PASS, "2/2 (100.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 1/1 pass; "
         "CuTe DSL (silu_and_mul_cute): not run, nvidia-cutlass-dsl is not installed"),
        (_with_cute([("rms_norm", "pass"), (CUDA, "unsupported"), (CUTE, "unsupported")],
                    "absent"), FAIL,
         "1/2 (50.0%) bf16 cases pass; CUDA C++ (silu_and_mul_cuda): 0/1 pass; "
         "CuTe DSL (silu_and_mul_cute): not run, nvidia-cutlass-dsl is not installed"),
    ],
)  # fmt: skip
def test_correctness_needs_the_cute_launch_where_the_dsl_is_installed(stage, status, line):
    finding = _finding("correctness", stage)
    assert (finding.status, finding.line) == (status, line)


def test_the_correctness_details_name_each_case_that_did_not_pass():
    finding = _finding("correctness", _correctness([("rms_norm", "fail"), (CUDA, "pass")]))
    assert finding.details == ("rms_norm n=64 bf16: fail: max rel error 0.3",)


# -- ncu ----------------------------------------------------------------------------------


def _ncu(ours: float | None, ncu: list[float] | None, available: bool = True) -> dict[str, Any]:
    return {"available": available, "kernel": "silu_and_mul", "case": "n=64 size=1073741824",
            "ours_ns": ours, "ncu_ns": ncu, "note": "ERR_NVGPUCTRPERM"}  # fmt: skip


# ncu: the median of its durations within 10% of ours.
NCU_EDGES = [
    (_ncu(100_000.0, [90_000.0]), PASS),  # -10%
    (_ncu(100_000.0, [89_999.0]), FAIL),
    (_ncu(100_000.0, [109_999.0]), PASS),
    (_ncu(100_000.0, [110_001.0]), FAIL),
    (_ncu(100_000.0, [80_000.0, 100_000.0, 200_000.0]), PASS),  # the median, not the mean
    (_ncu(100_000.0, [120_000.0, 120_000.0, 100_000.0]), FAIL),
    (_ncu(100_000.0, []), INCOMPLETE),
    (_ncu(100_000.0, None), INCOMPLETE),
    (_ncu(None, [100_000.0]), INCOMPLETE),
    (_ncu(100_000.0, [100_000.0], available=False), SKIPPED),
]


def test_the_ncu_line_quotes_both_medians_and_the_band():
    finding = _finding("ncu", _ncu(285_400.0, [284_100.0, 286_020.0]))
    assert finding.line == (
        "silu_and_mul n=64 size=1073741824: ncu gpu__time_duration median 285.06 us over 2 "
        "launches, ours 285.40 us, ncu/ours 0.999; pass within +-10%"
    )
    assert _finding("ncu", _ncu(285_400.0, [])).line == (
        "ours 285400.0, ncu 0 kernels: ERR_NVGPUCTRPERM"
    )
    assert _finding("ncu", _ncu(None, None, available=False)).line == "ncu is not on this host"


@pytest.mark.parametrize(
    ("key", "stage", "status"),
    [
        (key, stage, status)
        for key, edges in (
            ("aa", AA_EDGES),
            ("coverage", COVERAGE_EDGES),
            ("sol", SOL_EDGES),
            ("granularity", GRANULARITY_EDGES),
            ("clocks", CLOCKS_EDGES),
            ("ncu", NCU_EDGES),
        )
        for stage, status in edges
    ],
)
def test_each_rule_passes_at_its_limit_and_fails_just_past_it(key, stage, status):
    assert _finding(key, stage).status == status


# -- the traced decode step ---------------------------------------------------------------


def _trace_stage(found: int = 2, unmatched_share: float = 0.125, **changes: Any) -> dict:
    """A decode step read back (``serving/step_trace.py``'s fields): two kernels matched,
    one unmatched event, rms_norm launched twice and found ``found`` times."""
    stage = {
        "kernel_events": True, "steps": 3, "gpu_ns": 8000, "rows_gpu_ns": 8000,
        "matched_share": 1 - unmatched_share, "unmatched_share": unmatched_share,
        "rows": [{"kernel": "rms_norm", "trace": "rms_norm_kernel", "share": 0.5},
                 {"kernel": "gemm", "trace": "gemm_kernel", "share": 0.375},
                 {"kernel": None, "trace": "memcpy_kernel", "share": unmatched_share}],
        "functions": {"rms_norm_kernel": {"found": found, "expected": 2},
                      "gemm_kernel": {"found": 1, "expected": 1}},
        "errors": [], "unsupported": ["silu_and_mul_cuda: CUDA C++ kernel: compile-only"],
    }  # fmt: skip
    return json.loads(json.dumps({**stage, **changes}))


def test_the_trace_line_counts_the_shares_and_the_functions_found():
    whole = _finding("trace", _trace_stage())
    assert whole.status == PASS
    assert whole.line == (
        "3 kernels over 3 steps, 8.0 us of GPU time: matched 87.5% + unmatched 12.5% = "
        "100.0000%; 2/2 launched functions found as often as launched"
    )
    assert whole.details == (
        "not run on this device: silu_and_mul_cuda: CUDA C++ kernel: compile-only",
        "unmatched: memcpy_kernel 12.5%",
    )
    short = _finding("trace", _trace_stage(found=1))
    assert short.status == FAIL
    assert short.line.endswith("; 1/2 launched functions found as often as launched")
    assert short.details[0] == "rms_norm_kernel: 1 launches in the trace, 2 launched"


def test_a_trace_whose_shares_do_not_sum_to_one_fails():
    # Every event counted twice: the shares sum to 2, not 1.
    double = _finding("trace", _trace_stage(matched_share=1.75, unmatched_share=0.25))
    assert double.status == FAIL and "= 200.0000%" in double.line
    lost = _finding("trace", _trace_stage(rows_gpu_ns=7000))
    assert lost.status == FAIL
