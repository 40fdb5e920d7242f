"""Two stored runs compared case by case: what a PR check decides and a PR comment shows.

``comparison_from_runs`` reads both runs from the store; ``compare_runs`` is the pure part:
per case in both runs the A/B verdict on the stored raw samples (``analysis.verdict``),
static regressions between the two runs' builds (``analysis.static_diff``), correctness
failures at head that the base did not have, and what kept a case or the whole comparison
from being judged. Each case
and build is judged by its kernel's thresholds (``analysis.thresholds``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Literal

import psycopg

from kernelwatch.analysis.build_identity import CaseKey, case_key
from kernelwatch.analysis.shift_test import counted_samples
from kernelwatch.analysis.static_diff import Finding, diff_builds
from kernelwatch.analysis.thresholds import Thresholds, VerdictConfig
from kernelwatch.analysis.verdict import ABVerdict, ABVerdictName, compare
from kernelwatch.harness.records import BuildMetrics
from kernelwatch.store.pr_findings import PrFinding
from kernelwatch.store.report_queries import (
    CorrectnessRow,
    MeasurementRow,
    MeasurementSamples,
    RunHeader,
    run_builds,
    run_correctness,
    run_header,
    run_measurements,
    run_samples,
)

Outcome = Literal[0, 1, 2, 3]
#: The verdict of a case whose build was identical on both sides, and what it means.
IDENTICAL = "IDENTICAL"
UNTIMED = "identical build: not timed"
#: The correctness verdicts that count as failures.
FAILED = ("fail", "error")
_DEFAULT = Thresholds()


@dataclass(frozen=True)
class CaseComparison:
    """One case measured in both runs: its verdict, or ``problem`` saying why there is none
    (a side errored, or too few samples counted)."""

    base: MeasurementRow
    head: MeasurementRow
    verdict: ABVerdict | None
    problem: str = ""

    @property
    def verdict_name(self) -> ABVerdictName | Literal["ERROR"]:
        """The A/B verdict, or ``ERROR`` when the case could not be compared."""
        return self.verdict.verdict if self.verdict is not None else "ERROR"


@dataclass(frozen=True)
class RunSide:
    """What a comparison reads of one run."""

    header: RunHeader
    measurements: Sequence[MeasurementRow]
    samples: Mapping[str, MeasurementSamples]
    builds: Sequence[BuildMetrics]
    correctness: Sequence[CorrectnessRow]


@dataclass(frozen=True)
class Comparison:
    """Head against base. ``problem`` is set when the comparison itself could not be made
    (nothing in common, different device models); ``notes`` qualify one that was made (a
    kernel judged by thresholds of its own among them). ``correctness_failures`` are the
    cases that fail or error at head but not at base; ``already_failing`` those that
    failed at base too (shown, not blamed on the head). ``untimed`` are the head's checked
    cases whose build identity was the same on both sides, so they were not timed
    (``analysis/build_identity.py``): a verdict of their own."""

    base: RunHeader
    head: RunHeader
    thresholds: Thresholds
    cases: tuple[CaseComparison, ...]
    only_base: tuple[MeasurementRow, ...]
    only_head: tuple[MeasurementRow, ...]
    static: tuple[Finding, ...]
    correctness_failures: tuple[CorrectnessRow, ...]
    problem: str
    notes: tuple[str, ...]
    already_failing: tuple[CorrectnessRow, ...] = ()
    untimed: tuple[CorrectnessRow, ...] = ()

    def with_verdict(self, name: str) -> list[CaseComparison]:
        """The cases with verdict ``name`` (``ERROR``: not compared), worst first: by the
        distance of the ratio from 1."""
        chosen = [c for c in self.cases if c.verdict_name == name]
        return sorted(chosen, key=_severity, reverse=True)

    @property
    def slower(self) -> list[CaseComparison]:
        """Cases slower at head beyond the margin."""
        return self.with_verdict("SLOWER")

    @property
    def faster(self) -> list[CaseComparison]:
        """Cases faster at head beyond the margin."""
        return self.with_verdict("FASTER")

    @property
    def errored(self) -> list[CaseComparison]:
        """Cases in both runs that could not be compared."""
        return self.with_verdict("ERROR")

    @property
    def verdict_config(self) -> VerdictConfig:
        """The verdict thresholds of every kernel without a per-kernel override."""
        return self.thresholds.verdict

    @property
    def methods(self) -> tuple[str, ...]:
        """The measurement methods of the compared cases."""
        return tuple(sorted({c.head.method for c in self.cases}))

    @property
    def outcome(self) -> Outcome:
        """0: no regression; 1: a case SLOWER, a static regression or a correctness failure
        at head; 2: the comparison could not be made; 3: no regression found, but a case is
        still AMBIGUOUS (an unsettled case is no verdict, so never 0)."""
        if self.problem:
            return 2
        if self.slower or self.static or self.correctness_failures:
            return 1
        if self.with_verdict("AMBIGUOUS"):
            return 3
        return 0


def pr_findings(comparison: Comparison) -> list[PrFinding]:
    """What ``comparison`` concluded, as the store keeps it for the PR dashboard."""
    found = [
        PrFinding("timing", c.head.kernel, c.head.case_label, c.head.dtype, c.verdict_name,
                  *((c.verdict.ratio, c.verdict.ci_low, c.verdict.ci_high, c.verdict.p_value)
                    if c.verdict is not None else (None, None, None, None)), c.problem,
                  base_ns=c.base.median_ns, head_ns=c.head.median_ns)
        for c in comparison.cases
    ]  # fmt: skip
    found += [
        PrFinding("static", f.kernel, f.case, f.dtype, f.rule, detail=f.message, arch=f.arch,
                  function=f.function, before_value=f.before, after_value=f.after)
        for f in comparison.static
    ]  # fmt: skip
    found += [
        PrFinding("correctness", f.kernel, f.case_label, f.dtype, f.verdict, detail=f.reason)
        for f in comparison.correctness_failures
    ]
    found += [
        PrFinding("timing", c.kernel, c.case_label, c.dtype, IDENTICAL, detail=UNTIMED)
        for c in comparison.untimed
    ]
    return found


def comparison_from_runs(
    conn: psycopg.Connection,
    base_run_id: str,
    head_run_id: str,
    thresholds: Thresholds,
    identical: Collection[CaseKey] = (),
) -> Comparison:
    """Compare the stored run ``head_run_id`` against ``base_run_id`` with the configured
    ``thresholds``; ``identical`` are the cases left untimed for an identical build. Raises
    ``store.report_queries.RunNotFound`` when either run is not stored."""
    return compare_runs(_side(conn, base_run_id), _side(conn, head_run_id), thresholds, identical)


def compare_runs(
    base: RunSide,
    head: RunSide,
    thresholds: Thresholds = _DEFAULT,
    identical: Collection[CaseKey] = (),
) -> Comparison:
    """The comparison of two runs already read from the store. The head's checked cases in
    ``identical`` (``analysis.build_identity.case_key``) that passed their check and that
    head did not measure are ``untimed``."""
    head_by_key = {m.series_key: m for m in head.measurements}
    base_keys = {m.series_key for m in base.measurements}
    cases = tuple(
        _compare_case(
            m,
            head_by_key[m.series_key],
            base.samples,
            head.samples,
            thresholds.for_kernel(m.kernel).verdict,
        )
        for m in base.measurements
        if m.series_key in head_by_key
    )
    failed_at_base = {_case(c) for c in base.correctness if c.verdict in FAILED}
    failed = [c for c in head.correctness if c.verdict in FAILED]
    measured = {case_key(m.kernel, m.dtype, m.params) for m in head.measurements}
    untimed = tuple(
        c for c in head.correctness
        if c.verdict == "pass"
        and (key := case_key(c.kernel, c.dtype, c.params)) in identical and key not in measured
    )  # fmt: skip
    return Comparison(
        base=base.header,
        head=head.header,
        thresholds=thresholds,
        cases=cases,
        only_base=tuple(m for m in base.measurements if m.series_key not in head_by_key),
        only_head=tuple(m for m in head.measurements if m.series_key not in base_keys),
        static=tuple(diff_builds(base.builds, head.builds, thresholds)),
        correctness_failures=tuple(c for c in failed if _case(c) not in failed_at_base),
        problem=_problem(base.header, head.header, cases, untimed),
        notes=_notes(base.header, head.header) + _own_thresholds(cases, thresholds),
        already_failing=tuple(c for c in failed if _case(c) in failed_at_base),
        untimed=untimed,
    )


def _case(row: CorrectnessRow) -> tuple[str, str, str, str]:
    return row.kernel, row.workload, json.dumps(row.params, sort_keys=True), row.dtype


def _side(conn: psycopg.Connection, run_id: str) -> RunSide:
    header = run_header(conn, run_id)
    return RunSide(
        header=header,
        measurements=run_measurements(conn, header.run_id),
        samples=run_samples(conn, header.run_id),
        builds=run_builds(conn, header.run_id),
        correctness=run_correctness(conn, header.run_id),
    )


def _compare_case(
    base: MeasurementRow,
    head: MeasurementRow,
    base_samples: Mapping[str, MeasurementSamples],
    head_samples: Mapping[str, MeasurementSamples],
    config: VerdictConfig,
) -> CaseComparison:
    for side, row in (("base", base), ("head", head)):
        if row.status != "ok":
            reason = f": {row.reason}" if row.reason else ""
            return CaseComparison(base, head, None, f"{side} {row.status}{reason}")
    a_ns, a_clock = counted_samples(base_samples[base.series_key])
    b_ns, b_clock = counted_samples(head_samples[head.series_key])
    both_clocks = a_clock is not None and b_clock is not None
    try:
        verdict = compare(
            a_ns, b_ns, config, a_clock if both_clocks else None, b_clock if both_clocks else None
        )
    except ValueError as exc:
        return CaseComparison(
            base, head, None, f"{exc} (counted: base {a_ns.size}, head {b_ns.size})"
        )
    return CaseComparison(base, head, verdict)


def _problem(
    base: RunHeader,
    head: RunHeader,
    cases: Sequence[CaseComparison],
    untimed: Sequence[CorrectnessRow] = (),
) -> str:
    if base.repository != head.repository:
        return f"the runs are of different repositories ({base.repository}, {head.repository})"
    if base.device.name != head.device.name:
        return (
            f"base ran on {base.device.name} and head on {head.device.name}: an A/B "
            "comparison needs one device"
        )
    if not cases and not untimed:
        return "the runs have no measured case in common"
    if cases and all(c.verdict is None for c in cases):
        return f"none of the {len(cases)} cases in common could be compared (see errors)"
    return ""


def _notes(base: RunHeader, head: RunHeader) -> tuple[str, ...]:
    notes = []
    if (base.device.host, base.device.uuid) != (head.device.host, head.device.uuid):
        notes.append(
            "base and head ran on different GPUs of the same model: the ratios include any "
            "difference between the two devices"
        )
    if base.trigger != "pr" or head.trigger != "pr":
        notes.append(
            "not an interleaved A/B pair: the ratios compare two separate runs, so drift "
            "between them counts as change"
        )
    return tuple(notes)


def _own_thresholds(cases: Sequence[CaseComparison], thresholds: Thresholds) -> tuple[str, ...]:
    """A note per compared kernel whose verdict thresholds differ from the defaults."""
    notes = []
    for kernel in sorted({c.base.kernel for c in cases}):
        own = thresholds.for_kernel(kernel).verdict
        changed = [
            f"{f.name} {getattr(own, f.name):g}"
            for f in fields(own)
            if getattr(own, f.name) != getattr(thresholds.verdict, f.name)
        ]
        if changed:
            notes.append(
                f"{kernel} is judged by its own verdict thresholds ({', '.join(changed)}; "
                "[[thresholds]] in kernelwatch.toml)"
            )
    return tuple(notes)


def _severity(case: CaseComparison) -> float:
    if case.verdict is None:
        return 0.0
    return abs(case.verdict.ratio - 1.0)
