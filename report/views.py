"""What a report page shows, built from stored rows: pure functions from query results to
the charts and table rows the templates draw."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from kernelwatch.report import charts
from kernelwatch.report import format as fmt
from kernelwatch.report.compare import CaseComparison, Comparison
from kernelwatch.report.repro import Source, Target, bench_command
from kernelwatch.store.report_queries import (
    BisectStep,
    CorrectnessRow,
    MeasurementRow,
    RunHeader,
)

#: History charts drawn per regression (its worst series); the rest are counted.
CHARTS_PER_REGRESSION = 6
#: Cases drawn on a comparison's ratio chart (worst first); the rest are counted.
RATIO_ROWS = 40
VERDICT_ORDER = ("SLOWER", "ERROR", "AMBIGUOUS", "FASTER", "SAME")


@dataclass(frozen=True)
class SeriesChart:
    """One series' history chart with its title and what changed."""

    title: str
    change: str
    svg: str


@dataclass(frozen=True)
class RegressionView:
    """An open regression: its row in ``report_regressions``, the history of its worst
    series, and the bisection that looked for its culprit."""

    regression: Mapping[str, Any]
    charts: tuple[SeriesChart, ...]
    hidden_series: int
    steps: tuple[BisectStep, ...]


@dataclass(frozen=True)
class MeasurementLine:
    """A row of a run's measurement table and the command that re-times it."""

    row: MeasurementRow
    repro: str


@dataclass(frozen=True)
class CaseLine:
    """A row of a comparison's table: the case, and the commands that re-time each side."""

    case: CaseComparison
    repro_base: str
    repro_head: str


@dataclass(frozen=True)
class RunView:
    """One run as a page section: header, measurements, correctness, speed of light."""

    header: RunHeader
    lines: tuple[MeasurementLine, ...]
    correctness: tuple[CorrectnessRow, ...]
    correctness_counts: Mapping[str, int]
    sol_svg: str | None


def run_view(
    header: RunHeader,
    measurements: Sequence[MeasurementRow],
    correctness: Sequence[CorrectnessRow],
    sources: Mapping[str, Source],
) -> RunView:
    """A run's section: every measurement with its repro command, correctness and SOL."""
    source = sources.get(header.repository)
    lines = tuple(
        MeasurementLine(m, bench_command(_target(header, m), source)) for m in measurements
    )
    return RunView(
        header=header,
        lines=lines,
        correctness=tuple(correctness),
        correctness_counts=dict(Counter(c.verdict for c in correctness)),
        sol_svg=sol_svg(measurements),
    )


def sol_svg(measurements: Iterable[MeasurementRow]) -> str | None:
    """The speed-of-light chart of the measurements that know their roofline, or None when
    none does (e.g. on the CPU)."""
    by_kernel: dict[str, list[charts.SolCase]] = {}
    for m in measurements:
        if m.status == "ok" and m.pct_sol is not None:
            label = f"{m.case_label} {m.dtype}"
            by_kernel.setdefault(m.kernel, []).append(charts.SolCase(label, m.pct_sol, m.bound))
    if not by_kernel:
        return None
    return charts.sol_chart(sorted(by_kernel.items()))


def history_chart(
    history: Sequence[Mapping[str, Any]], regression_id: int | None, culprit_sha: str | None
) -> tuple[str, str]:
    """The chart of one series' history rows (``report_series_history``, oldest first) with
    its change points and the bisection's culprit marked; and a line saying what changed."""
    kept = [row for row in history if row["median_ns"] is not None]
    points = [
        charts.HistoryPoint(
            median_ns=row["median_ns"],
            ci_low_ns=row["ci_low_ns"],
            ci_high_ns=row["ci_high_ns"],
            commit=row["commit_sha"],
            tick=row["measured_at"].strftime("%m-%d"),
        )
        for row in kept
    ]
    changes = [i for i, row in enumerate(kept) if row["change_point_id"] is not None and i > 0]
    ours = [
        i
        for i in changes
        if regression_id is not None and kept[i]["regression_id"] == regression_id
    ]
    markers = []
    for i in changes:
        row = kept[i]
        text = f"{fmt.change(1 + row['change_rel'])} at {fmt.sha(row['commit_sha'])}"
        markers.append(
            charts.Marker(i - 0.5, text, "change-point" if i in ours else "other-change")
        )
    if culprit_sha:
        x = _culprit_x(kept, ours or changes, culprit_sha)
        markers.append(charts.Marker(x, f"culprit {fmt.sha(culprit_sha)} (bisect)", "culprit"))
    said = "; ".join(m.label for m in markers if m.kind == "change-point")
    bounds = [0, *changes, len(points)]
    levels = [(a, b) for a, b in pairwise(bounds) if b > a]
    return charts.history_chart(points, markers, levels), said


def regression_view(
    detail: Mapping[str, Any],
    histories: Mapping[str, Sequence[Mapping[str, Any]]],
    steps: Sequence[BisectStep],
) -> RegressionView:
    """An open regression (``store.triage_state.show_regression``'s dict) with history charts of
    its first ``CHARTS_PER_REGRESSION`` series (``histories`` by series key)."""
    members = detail["change_point_list"]
    drawn = []
    for member in members[:CHARTS_PER_REGRESSION]:
        history = histories.get(member["series_key"], ())
        if not any(row["median_ns"] is not None for row in history):
            continue
        svg, change = history_chart(history, detail["regression_id"], detail["culprit_sha"])
        case = " ".join(f"{k}={v}" for k, v in member["params"].items())
        title = f"{member['kernel']} {case} {member['dtype']} · {member['device_model']}"
        drawn.append(SeriesChart(title, change, svg))
    return RegressionView(
        regression=detail,
        charts=tuple(drawn),
        hidden_series=len(members) - len(drawn),
        steps=tuple(steps),
    )


def case_lines(comparison: Comparison, sources: Mapping[str, Source]) -> tuple[CaseLine, ...]:
    """Every compared case, most important first (slower, errors, ambiguous, faster, same;
    worst first within each), with repro commands for base and head."""
    source = sources.get(comparison.head.repository)
    lines = []
    for name in VERDICT_ORDER:
        for case in comparison.with_verdict(name):
            lines.append(
                CaseLine(
                    case,
                    bench_command(_target(comparison.base, case.base), source),
                    bench_command(_target(comparison.head, case.head), source),
                )
            )
    return tuple(lines)


def ratio_svg(comparison: Comparison) -> tuple[str | None, int]:
    """The ratio chart of the compared cases that are not the same (worst first, at most
    ``RATIO_ROWS``) and how many such cases were left off it; None when every case is the
    same (or none was compared)."""
    notable = [
        (c, c.verdict)
        for name in ("SLOWER", "AMBIGUOUS", "FASTER")
        for c in comparison.with_verdict(name)
        if c.verdict is not None
    ]
    if not notable:
        return None, 0
    rows = [
        charts.RatioRow(
            f"{c.head.kernel} {c.head.case_label} {c.head.dtype}",
            v.ratio,
            v.ci_low,
            v.ci_high,
            v.verdict,
        )
        for c, v in notable[:RATIO_ROWS]
    ]
    return charts.ratio_chart(rows, comparison.verdict_config.margin), len(notable) - len(rows)


def _culprit_x(rows: Sequence[Mapping[str, Any]], changes: Sequence[int], culprit: str) -> float:
    # A measured culprit sits on its point; an unmeasured one (bisection probes commits the
    # nightly skipped) lies between the last good point and the change.
    for i, row in enumerate(rows):
        if row["commit_sha"] == culprit:
            return float(i)
    return (changes[0] if changes else len(rows)) - 0.5


def _target(header: RunHeader, m: MeasurementRow) -> Target:
    return Target(header.repository, header.suite, header.commit_sha, m.kernel, m.workload, m.dtype)
