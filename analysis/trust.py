"""Whether the timing can be trusted: the GPU self-check's questions, judged.

Pure functions over the self-check's data (``harness/selfcheck/stages.py`` gathers it; the
shape of each stage's data is in ``harness/selfcheck/measure.py`` and below). Every question
gets one :class:`Finding`: ``pass``, ``fail``, ``incomplete`` (the data to settle it is
missing: a stage that did not run, ran out of time, or a tool that cannot run here) or
``skipped`` (not applicable on this host). The thresholds are declared here, once, and quoted
in each line.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kernelwatch.analysis.verdict import compare_measurements
from kernelwatch.harness.records import Measurement

PASS, FAIL, INCOMPLETE, SKIPPED = "pass", "fail", "incomplete", "skipped"

#: A/A: the design rate of verdicts other than SAME on identical code, and how unlikely at
#: that rate the count seen must be to fail (a count, so a handful of cases is judged fairly:
#: one AMBIGUOUS in 30 pairs is what a 0.5% rate gives 14% of the time).
AA_MAX_NOT_SAME = 0.005
AA_SIGNIFICANCE = 0.05
#: CI coverage: the share of repeats whose 95% CI holds the other repeats' median.
COVERAGE_MIN = 0.85
#: For two independent runs with exact 95% CIs, the second's median falls in the first's
#: CI with probability 2 Phi(1.96 / sqrt 2) - 1: their difference has twice the variance.
PAIRED_COVERAGE = math.erf(1.96 / 2)
#: Agreement with do_bench (median, cold L2 both): within this share, plus two event steps.
DO_BENCH_BAND = 0.05
#: Agreement with torch.utils.benchmark (warm L2, back-to-back): judged only for kernels
#: long enough that launch overhead is hidden, where warm L2 may make it faster.
TORCH_BENCH_MIN_NS = 100_000.0
TORCH_BENCH_BAND = (0.85, 1.05)
#: %SOL of the large memory-bound case against the measured copy ceiling, and at most the
#: datasheet's peak: outside, the byte model or the timing is wrong.
SOL_OF_COPY = (0.5, 1.05)
SOL_OF_DATASHEET_MAX = 1.0
#: At most this share of samples throttled (SM clock under 75% of the maximum).
THROTTLED_MAX = 0.05
#: ncu's gpu__time_duration against our median.
NCU_BAND = 0.10
#: CUDA events' nominal step, when the granularity stage did not measure one.
EVENT_STEP_NS = 500.0
#: The traced step: the matched and unmatched shares must sum to the step's GPU time within
#: this (a kernel event counted twice or dropped moves the sum by its share).
TRACE_SHARE_TOLERANCE = 1e-6

#: The questions, in the report's order: key, title.
QUESTIONS = (
    ("aa", "A/A false regressions"),
    ("coverage", "CI coverage"),
    ("agreement", "Agreement with do_bench and torch.utils.benchmark"),
    ("sol", "%SOL of a large memory-bound case"),
    ("granularity", "Event granularity"),
    ("clocks", "Clocks and throttling"),
    ("correctness", "Correctness (bf16) and the CUDA C++ and CuTe DSL launches"),
    ("ncu", "ncu cross-check"),
    ("trace", "A traced decode step read as a serving trace"),
)


@dataclass(frozen=True)
class Finding:
    """One question's answer: a status, one line with its numbers, and detail lines."""

    key: str
    question: str
    status: str
    line: str
    details: tuple[str, ...] = ()


def judge(data: Mapping[str, Any]) -> list[Finding]:
    """Every question's finding from the stages' data so far (a missing stage: incomplete)."""
    judges = {
        "aa": _aa,
        "coverage": _coverage,
        "agreement": _agreement,
        "sol": _sol,
        "granularity": _granularity,
        "clocks": _clocks,
        "correctness": _correctness,
        "ncu": _ncu,
        "trace": _trace,
    }
    findings = []
    for key, question in QUESTIONS:
        stage = data.get(key)
        if stage is None:
            findings.append(Finding(key, question, INCOMPLETE, "not run"))
        elif "error" in stage:
            findings.append(
                Finding(key, question, FAIL, f"the measurement failed: {stage['error']}")
            )
        else:
            status, line, details = judges[key](stage, data)
            findings.append(Finding(key, question, status, line, tuple(details)))
    return findings


def settled(findings: Sequence[Finding]) -> bool:
    """Every question passed or did not apply."""
    return not any(f.status in (FAIL, INCOMPLETE) for f in findings)


def pair_verdict(base: Measurement, head: Measurement) -> dict[str, Any]:
    """An A/A case's verdict and its numbers as ``aa.json`` keeps them (what :func:`judge`
    reads back), not the samples. A side with too few unthrottled samples is not judged: the
    pair keeps the reason, and :func:`judge` counts it as an open case, never a crash."""
    try:
        verdict = compare_measurements(base, head)
    except ValueError as exc:
        return {"verdict": None, "same_config": base.config == head.config,
                "verdict_reason": f"not judged: {exc}"}  # fmt: skip
    return {
        "verdict": verdict.verdict,
        "ratio": verdict.ratio,
        "ci_low": verdict.ci_low,
        "ci_high": verdict.ci_high,
        "n_a": verdict.n_a,
        "n_b": verdict.n_b,
        "cycle_verdict": verdict.cycle_verdict,
        "same_config": base.config == head.config,
        "verdict_reason": verdict.reason,
    }


Judged = tuple[str, str, list[str]]


def _share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)" if total else "0/0"


def aa_allowed(timed: int) -> int:
    """The most verdicts other than SAME that ``timed`` A/A pairs may show: the largest k
    that ``timed`` pairs at the design rate reach or pass with probability at least
    ``AA_SIGNIFICANCE`` (binomial)."""
    rate, allowed, at_least = AA_MAX_NOT_SAME, 0, 1.0
    for k in range(timed + 1):
        if at_least < AA_SIGNIFICANCE:
            break
        allowed = k
        at_least -= math.comb(timed, k) * rate**k * (1 - rate) ** (timed - k)
    return allowed


def _aa(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    cases = stage["cases"]
    timed = [c for c in cases if c["verdict"] is not None]
    errors = [c for c in cases if c["status"] == "error"]
    not_same = [c for c in timed if c["verdict"] != "SAME"]
    regressions = [c for c in not_same if c["verdict"] in ("SLOWER", "FASTER")]
    # An ok pair with no verdict is one pair_verdict could not judge (it says why).
    unjudged = [
        c for c in cases if c["status"] == "ok" and "verdict_reason" in c and c["verdict"] is None
    ]
    details = [
        f"{c['kernel']} {c['case']}: {c['verdict']} (B/A {c['ratio']:.4f}, "
        f"95% CI {c['ci_low']:.4f}-{c['ci_high']:.4f})"
        for c in not_same
    ] + [f"{c['kernel']} {c['case']}: error: {c['reason']}" for c in errors]
    details += [f"{c['kernel']} {c['case']}: {c['verdict_reason']}" for c in unjudged]
    allowed = aa_allowed(len(timed))
    processes = f" from {stage['processes']} processes" if stage.get("processes") else ""
    line = (
        f"{len(not_same)} of {len(timed)} pairs other than SAME "
        f"({len(regressions)} SLOWER/FASTER){processes}, {len(timed)} of {stage['planned']} "
        f"planned; pass <= {allowed} of {len(timed)} (a {100 * AA_MAX_NOT_SAME:g}% rate, "
        f"p >= {AA_SIGNIFICANCE:g})"
    )
    if errors:
        return FAIL, line + f"; {len(errors)} cases errored", details
    if not timed:
        return INCOMPLETE, line, details
    if len(not_same) > allowed:
        return FAIL, line, details
    if len(cases) < stage["planned"]:
        return INCOMPLETE, line + " (the deadline stopped the rest)", details
    if unjudged:
        return INCOMPLETE, line + f"; {len(unjudged)} pair(s) too few samples to judge", details
    return PASS, line, details


def coverage_counts(cases: Sequence[Mapping[str, Any]]) -> tuple[int, int, int, int]:
    """(hits, total) of repeats whose CI holds the median of the other repeats' medians,
    then (hits, total) of repeats after the first whose median falls in the first's CI."""
    held = total = first_held = first_total = 0
    for case in cases:
        repeats = [r for r in case["repeats"] if r is not None]
        medians = [r["median_ns"] for r in repeats]
        for i, repeat in enumerate(repeats):
            others = medians[:i] + medians[i + 1 :]
            if len(others) >= 2:
                total += 1
                held += repeat["ci_low_ns"] <= statistics.median(others) <= repeat["ci_high_ns"]
        if repeats:
            first = repeats[0]
            for repeat in repeats[1:]:
                first_total += 1
                first_held += first["ci_low_ns"] <= repeat["median_ns"] <= first["ci_high_ns"]
    return held, total, first_held, first_total


def _coverage(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    held, total, first_held, first_total = coverage_counts(stage["cases"])
    details = [
        f"{c['kernel']} {c['case']}: medians "
        + ", ".join(f"{r['median_ns'] / 1e3:.2f}" if r else "-" for r in c["repeats"])
        + " us"
        for c in stage["cases"]
    ]
    details.append(
        f"the literal reading, repeats' medians inside the first run's 95% CI: "
        f"{_share(first_held, first_total)}; {100 * PAIRED_COVERAGE:.0f}% is what exact CIs "
        "give two independent runs (their difference has twice the variance)"
    )
    line = (
        f"{_share(held, total)} repeats' 95% CIs hold the median of the other repeats; "
        f"target close to 95%, pass >= {100 * COVERAGE_MIN:g}%"
    )
    if total == 0:
        return INCOMPLETE, line, details
    return (PASS if held >= COVERAGE_MIN * total else FAIL), line, details


def _event_step(data: Mapping[str, Any]) -> float:
    granularity = data.get("granularity") or {}
    return granularity.get("smallest_step_ns") or EVENT_STEP_NS


def _agreement(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    step = _event_step(data)
    details, failed, judged_do_bench = [], 0, 0
    for row in stage["rows"]:
        verdicts = [(f"error {error}", False) for error in row.get("errors", ())]
        ours = (row.get("ours") or {}).get("median_ns")
        if ours is None:
            verdicts.append(("ours: not measured", False))
        else:
            do_bench, torch_ns = row.get("do_bench_ns"), row.get("torch_benchmark_ns")
            if do_bench is not None:
                judged_do_bench += 1
                band = DO_BENCH_BAND + 2 * step / ours
                ratio = do_bench / ours
                verdicts.append((f"do_bench/ours {ratio:.3f} (band +-{100 * band:.1f}%)",
                                 abs(ratio - 1) <= band))  # fmt: skip
            if torch_ns is not None:
                verdicts.append(_torch_agreement(torch_ns / ours, ours))
        failed += sum(not ok for _, ok in verdicts)
        text = "; ".join(what + ("" if ok else " FAIL") for what, ok in verdicts)
        details.append(f"{row['kernel']} {row['case']}: {text}")
    line = f"{len(stage['rows'])} cases, {failed} outside their band"
    if failed:
        return FAIL, line, details
    if judged_do_bench == 0:
        return INCOMPLETE, line + "; do_bench could not run here", details
    if stage.get("partial"):
        return INCOMPLETE, line + " (the deadline stopped the rest)", details
    return PASS, line, details


def _torch_agreement(ratio: float, ours_ns: float) -> tuple[str, bool]:
    what = f"torch.utils.benchmark/ours {ratio:.3f}"
    if ours_ns < TORCH_BENCH_MIN_NS:
        return f"{what} (not judged: under {TORCH_BENCH_MIN_NS / 1e3:g} us, launch-bound)", True
    low, high = TORCH_BENCH_BAND
    return f"{what} (band {low:g}-{high:g})", low <= ratio <= high


def _sol(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    if "skipped" in stage:
        return INCOMPLETE, stage["skipped"], []
    gbps, copy, sheet = stage["gbps"], stage.get("copy_gbps"), stage.get("datasheet_gbps")
    parts = [f"{stage['kernel']} {stage['case']}: {gbps:.0f} GB/s"]
    if copy:
        parts.append(f"{100 * gbps / copy:.1f}% of the measured copy ceiling ({copy:.0f} GB/s)")
    if sheet:
        parts.append(f"{100 * gbps / sheet:.1f}% of the datasheet HBM peak ({sheet:.0f} GB/s)")
    line = "; ".join(parts) + (
        f"; pass {100 * SOL_OF_COPY[0]:g}-{100 * SOL_OF_COPY[1]:g}% of the copy ceiling"
    )
    if not copy:
        return INCOMPLETE, line + "; no measured copy ceiling", []
    low, high = SOL_OF_COPY
    inside = low <= gbps / copy <= high and (not sheet or gbps / sheet <= SOL_OF_DATASHEET_MAX)
    return (PASS if inside else FAIL), line, []


def _granularity(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    summary = stage["summary"]
    step = stage["smallest_step_ns"]
    quantum = stage["quantum_ns"]
    line = (
        f"{stage['kernel']} {stage['case']}: {stage['distinct']} distinct values in "
        f"{stage['samples']} samples, smallest step " + ("-" if step is None else f"{step:.0f} ns")
    )
    if summary is None:
        return INCOMPLETE, line + "; no statistic", []
    median = summary["median_ns"]
    half = summary["rel_ci_halfwidth"] * median
    line += f"; median {median / 1e3:.2f} us, CI +-{half:.0f} ns, stop {summary['stop']}"
    # The statistic must not claim more than the events resolve: half a step either side.
    return (PASS if half >= quantum / 2 - 1e-9 else FAIL), line, []


def _clocks(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    samples, throttled = stage["samples"], stage["throttled"]
    policy = stage.get("policy") or {}
    median, top = stage.get("median_sm_mhz"), stage.get("max_sm_mhz")
    reasons = ", ".join(f"{name} {count}" for name, count in sorted(stage["reasons"].items()))
    locked = stage.get("locked_reason_seen")
    apps, default = policy.get("applications_sm_mhz"), policy.get("default_applications_sm_mhz")
    details = [
        "SM clock median "
        + ("unknown" if median is None else f"{median:.0f} MHz")
        + " of max "
        + ("unknown" if top is None else f"{top:.0f} MHz"),
        f"clock-event reasons seen (samples): {reasons or 'none'}",
        "power limit "
        + ("unknown" if policy.get("power_limit_w") is None else f"{policy['power_limit_w']:.0f} W")
        + ", persistence mode "
        + {True: "on", False: "off", None: "unknown"}[policy.get("persistence_mode")],
        "clocks locked: "
        + {True: "yes (applications-clocks reason seen)", False: "no", None: "unknown"}[locked]
        + ("" if apps is None else f"; applications SM clock {apps:.0f} of default {default} MHz"),
    ]
    line = (
        f"{_share(throttled, samples)} samples throttled (SM clock under 75% of max); "
        f"pass <= {100 * THROTTLED_MAX:g}%"
    )
    if not samples:
        return INCOMPLETE, line, details
    if top is None:
        return INCOMPLETE, line + "; the maximum SM clock is unknown (no NVML)", details
    return (PASS if throttled <= THROTTLED_MAX * samples else FAIL), line, details


def _correctness(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    cute_kernels = stage.get("cute_kernels", [])  # reports before CuTe DSL kernels have none
    # Without the optional nvidia-cutlass-dsl a CuTe DSL case cannot run: said, not failed.
    absent = stage.get("cute_dsl") == "absent"
    cases = [c for c in stage["cases"] if not (absent and c["kernel"] in cute_kernels)]
    bad = [c for c in cases if c["verdict"] != "pass"]
    details = [f"{c['kernel']} {c['case']} {c['dtype']}: {c['verdict']}: {c['reason']}"
               for c in bad]  # fmt: skip
    line = f"{_share(len(cases) - len(bad), len(cases))} {stage['dtype']} cases pass"
    ran = True  # each CUDA C++ and CuTe DSL kernel has cases here (their passing is ``bad``'s)
    for language, kernels in (("CUDA C++", stage["cuda_kernels"]), ("CuTe DSL", cute_kernels)):
        if not kernels:
            continue
        line += f"; {language} ({', '.join(kernels)}): "
        if language == "CuTe DSL" and absent:
            line += "not run, nvidia-cutlass-dsl is not installed"
            continue
        own = [c for c in cases if c["kernel"] in kernels]
        ran = ran and bool(own)
        line += f"{sum(c['verdict'] == 'pass' for c in own)}/{len(own)} pass" if own else "not run"
    if len(stage["cases"]) < stage["planned"]:
        return INCOMPLETE, line + " (the deadline stopped the rest)", details
    return (PASS if cases and not bad and ran else FAIL), line, details


def _ncu(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    if not stage.get("available"):
        return SKIPPED, "ncu is not on this host", []
    ours, ncu = stage.get("ours_ns"), stage.get("ncu_ns") or []
    if ours is None or not ncu:
        return INCOMPLETE, f"ours {ours}, ncu {len(ncu)} kernels: {stage.get('note', '')}", []
    theirs = statistics.median(ncu)
    ratio = theirs / ours
    line = (
        f"{stage['kernel']} {stage['case']}: ncu gpu__time_duration median "
        f"{theirs / 1e3:.2f} us over {len(ncu)} launches, ours {ours / 1e3:.2f} us, "
        f"ncu/ours {ratio:.3f}; pass within +-{100 * NCU_BAND:g}%"
    )
    return (PASS if abs(ratio - 1) <= NCU_BAND else FAIL), line, []


def _trace(stage: Mapping[str, Any], data: Mapping[str, Any]) -> Judged:
    """The step's trace as ``serving/step_trace.py`` read it: every kernel event counted once
    (the shares sum to 1 and the rows' times to the step's GPU time), and every function the
    child launched found under its own name as often as it launched it."""
    errors = [f"left out of the step: {e}" for e in stage.get("errors", [])]
    # A kernel this device cannot run (a CUDA C++ kernel on the CPU) is said, not failed.
    unsupported = [f"not run on this device: {u}" for u in stage.get("unsupported", [])]
    if not stage.get("kernel_events"):
        return INCOMPLETE, stage.get("line", "no trace was read"), [*errors, *unsupported]
    shares = stage["matched_share"] + stage["unmatched_share"]
    functions = stage["functions"]
    missing = [f"{name}: {c['found']} launches in the trace, {c['expected']} launched"
               for name, c in functions.items() if c["found"] != c["expected"]]  # fmt: skip
    unmatched = [f"unmatched: {r['trace']} {100 * r['share']:.1f}%"
                 for r in stage["rows"] if r["kernel"] is None]  # fmt: skip
    line = (
        f"{len(stage['rows'])} kernels over {stage['steps']} steps, "
        f"{stage['gpu_ns'] / 1e3:.1f} us of GPU time: matched {100 * stage['matched_share']:.1f}%"
        f" + unmatched {100 * stage['unmatched_share']:.1f}% = {100 * shares:.4f}%; "
        f"{len(functions) - len(missing)}/{len(functions)} launched functions found as often "
        "as launched"
    )
    whole = abs(shares - 1.0) <= TRACE_SHARE_TOLERANCE and stage["rows_gpu_ns"] == stage["gpu_ns"]
    ok = whole and functions and not missing and not errors
    return (PASS if ok else FAIL), line, [*missing, *errors, *unsupported, *unmatched]
