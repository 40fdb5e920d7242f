"""The nightly's same-night pass: suspect, confirm, open.

After tonight's run is stored, every series measured tonight is tested against its recent
nights (``analysis/suspicion.py``), every case that passed in the previous nightly and fails
tonight is a correctness suspect, and every build of tonight's head that regressed against the
previous nightly head's is a static suspect (the ``build-diff`` rules). Timing suspects are
confirmed by an interleaved A/B of the night before the suspected change against tonight's
head on this device, the most severe first, within ``[confirm]``'s budget:

- SLOWER opens a regression (kind ``timing``, ``opened_by = confirmation``) right away, over
  the commit range of the suspected nights, with a change point per series (detector
  ``CONFIRM_DETECTOR``): the change-point net finds the same change later and, as with any
  stored change, does not open it again;
- FASTER is stored as an improvement (a change point, no alert);
- SAME marks the point as checked noise (shown on the history, excluded from later regimes);
- AMBIGUOUS after ``max_rounds`` rounds, or over the budget, is left to history and listed.

A newly failing case opens one correctness regression for the night; static findings join the
regression opened tonight for the same kernel (one alert per culprit), or else open one static
regression titled with the finding. Every suspect is a ``night_suspects`` row. The A/B itself
is a callback (the flow's ``tasks.ab`` on checkouts), so the pass is testable on a store alone.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import psycopg

from kernelwatch.analysis.shift_test import counted_samples
from kernelwatch.analysis.static_diff import Finding, diff_builds
from kernelwatch.analysis.suspicion import (
    Confirmed,
    Measured,
    Outcome,
    newly_failing,
    schedule,
    suspect_timing,
)
from kernelwatch.analysis.tail import TailShift
from kernelwatch.analysis.thresholds import ConfirmBudget, Thresholds
from kernelwatch.analysis.verdict import ABVerdict, compare_measurements
from kernelwatch.flows.bisection import case_key
from kernelwatch.harness.records import ABMeasurement
from kernelwatch.store.findings import (
    NewChangePoint,
    NewRegression,
    insert_change_points,
    open_regression,
    stored_change_points,
)
from kernelwatch.store.identity import series_key
from kernelwatch.store.report_queries import run_builds, run_correctness
from kernelwatch.store.series_history import StoredRun, StoredSeries, load_histories
from kernelwatch.store.suspects import (
    NightRun,
    SuspectRow,
    checked_points,
    insert_suspects,
    night_run,
    previous_nightly,
)
from kernelwatch.store.triage_state import add_event

CONFIRM_DETECTOR = "kw-ab-confirm-1"
ACTOR = "kernelwatch"
#: The outcomes in the order summaries count them.
OUTCOMES = typing.get_args(Outcome)

#: ``measure(base_sha, kernels, round)``: the A/B of ``kernels`` at ``base_sha`` (A) against
#: tonight's head (B) on this device; round 0 the normal samples, each later round more.
Measure = Callable[[str, tuple[str, ...], int], list[ABMeasurement]]


@dataclass(frozen=True)
class TimingSuspect:
    """A series whose newest nights left its regime: ``found`` on its usable points,
    ``onset`` (index into ``series.runs``) the first suspected night, ``base`` the night
    before it (the A side of the A/B) and ``tonight`` its newest point."""

    series: StoredSeries
    found: TailShift
    onset: int
    base: StoredRun
    tonight: StoredRun

    def label(self) -> str:
        """The series, for summaries."""
        return self.series.label()


@dataclass(frozen=True)
class SuspectLine:
    """One suspect as the nightly summary and report list it."""

    kind: str
    what: str
    outcome: str
    note: str
    regression_id: int | None = None


@dataclass(frozen=True)
class NightReport:
    """What the same-night pass did: every suspect, the regressions it opened (with their
    kinds) and the device seconds its A/Bs took."""

    suspects: tuple[SuspectLine, ...] = ()
    opened: tuple[tuple[int, str], ...] = ()
    gpu_seconds: float = 0.0


def night_pass(
    conn: psycopg.Connection,
    run_id: str,
    thresholds: Thresholds,
    budget: ConfirmBudget,
    measure: Measure,
) -> NightReport:
    """Suspect, confirm and open for tonight's stored nightly run ``run_id``; nothing when
    the run was not stored (spooled) or is the repository's first."""
    tonight = night_run(conn, run_id)
    if tonight is None:
        return NightReport()
    previous = previous_nightly(conn, tonight)
    histories = load_histories(conn, tonight.repository_id)
    with conn.cursor() as cur:
        known = stored_change_points(cur, tonight.repository_id)
    checked = checked_points(conn, [s.series_id for s in histories])
    timing = [
        s
        for series in histories
        if (s := _timing_suspect(series, tonight, known, checked, thresholds)) is not None
    ]
    confirmed = schedule(
        timing,
        group=lambda s: (s.base.commit_sha, s.series.kernel),
        severity=lambda s: abs(s.found.shift),
        estimate=lambda s: 2.0 * s.tonight.duration_s,
        measure=_measurer(timing, tonight.repository, thresholds, measure),
        budget=budget,
    )
    failing: list[SuspectRow] = []
    findings: list[Finding] = []
    if previous is not None:
        failing = _correctness_suspects(conn, previous, tonight)
        findings = diff_builds(
            run_builds(conn, previous.run_id), run_builds(conn, tonight.run_id), thresholds
        )
    with conn.transaction(), conn.cursor() as cur:
        return _write(cur, tonight, previous, confirmed, failing, findings)


def _timing_suspect(
    series: StoredSeries,
    tonight: NightRun,
    known: dict[int, set[int]],
    checked: set[int],
    thresholds: Thresholds,
) -> TimingSuspect | None:
    usable = [i for i, r in enumerate(series.runs) if r.status == "ok" and r.samples_ns]
    if (
        not usable
        or series.runs[usable[-1]].run_pk != tonight.pk
        or usable[-1] != len(series.runs) - 1
    ):
        return None
    runs = [series.runs[i] for i in usable]
    changes = known.get(series.series_id, set())
    starts = [j for j, r in enumerate(runs) if r.measurement_id in changes]
    found = suspect_timing(
        [_level(r) for r in runs],
        thresholds.for_kernel(series.kernel).confirm,
        regime_start=starts[-1] if starts else 0,
        checked={j for j, r in enumerate(runs) if r.measurement_id in checked},
    )
    if found is None or found.start == 0:
        return None
    return TimingSuspect(
        series, found, usable[found.start], runs[found.start - 1], runs[-1]
    )  # fmt: skip


def _level(run: StoredRun) -> float:
    return float(np.median(counted_samples(run)[0]))


def _measurer(
    suspects: Sequence[TimingSuspect], repository: str, thresholds: Thresholds, measure: Measure
) -> Callable[[Hashable, Sequence[int], int], Measured]:
    """The schedule's A/B: one ``measure`` call per group (a kernel at one base commit), its
    pairs matched to the suspects by series key and judged by the kernel's verdict
    thresholds."""

    def run(group: Hashable, members: Sequence[int], round_: int) -> Measured:
        base, kernel = group  # type: ignore[misc]
        pairs = measure(base, (kernel,), round_)
        by_key = {
            series_key(repository, p.case, p.device.name, p.method): p for p in pairs
        }  # fmt: skip
        verdicts: dict[int, ABVerdict] = {}
        errors: dict[int, str] = {}
        for i in members:
            pair = by_key.get(suspects[i].series.key)
            if pair is None:
                errors[i] = "the A/B did not measure this case"
            elif pair.status == "ok" and pair.base is not None and pair.head is not None:
                config = thresholds.for_kernel(kernel).verdict
                verdicts[i] = compare_measurements(pair.base, pair.head, config)
            else:
                errors[i] = pair.reason or pair.status
        return Measured(verdicts, sum(p.duration_s for p in pairs), errors)

    return run


def _correctness_suspects(
    conn: psycopg.Connection, previous: NightRun, tonight: NightRun
) -> list[SuspectRow]:
    def verdicts(run: NightRun) -> dict[tuple[str, str, str, str], tuple[str, str]]:
        return {
            (c.workload, *case_key({"kernel": c.kernel, "params": c.params, "dtype": c.dtype})): (
                c.verdict,
                c.reason,
            )
            for c in run_correctness(conn, run.run_id)
        }

    before, after = verdicts(previous), verdicts(tonight)
    broken = newly_failing(
        {k: v for k, (v, _) in before.items()}, {k: v for k, (v, _) in after.items()}
    )
    return [
        SuspectRow(
            run_pk=tonight.pk,
            repository_id=tonight.repository_id,
            kind="correctness",
            kernel=kernel,
            case_label=case,
            dtype=dtype,
            head_commit_id=tonight.commit_id,
            base_commit_id=previous.commit_id,
            suspicion=f"passed at {previous.sha[:12]}, {after[key][0]} at {tonight.sha[:12]}: "
            f"{after[key][1]}",
            outcome="regression",
        )
        for key in broken
        for _, kernel, case, dtype in [key]
    ]


def _write(
    cur: psycopg.Cursor,
    tonight: NightRun,
    previous: NightRun | None,
    confirmed: Sequence[Confirmed[TimingSuspect]],
    failing: Sequence[SuspectRow],
    findings: Sequence[Finding],
) -> NightReport:
    rows: list[SuspectRow] = []
    opened: list[tuple[int, str]] = []
    by_kernel: dict[str, int] = {}
    slower: dict[str, list[Confirmed[TimingSuspect]]] = {}
    for c in confirmed:
        if c.outcome == "regression":
            slower.setdefault(c.suspect.base.commit_sha or "", []).append(c)
    for group in slower.values():
        regression_id = _open_timing(cur, tonight, group)
        opened.append((regression_id, "timing"))
        by_kernel.update({c.suspect.series.kernel: regression_id for c in group})
    improvements = [c for c in confirmed if c.outcome == "improvement"]
    insert_change_points(cur, CONFIRM_DETECTOR, [_change_point(c) for c in improvements])
    rows += [_timing_row(tonight, c, by_kernel.get(c.suspect.series.kernel)) for c in confirmed]
    if failing:
        regression_id = _open_correctness(cur, tonight, previous, failing)
        opened.append((regression_id, "correctness"))
        by_kernel.update(dict.fromkeys((r.kernel for r in failing), regression_id))
        rows += [_joined(r, regression_id) for r in failing]
    static_rows = [_static_row(tonight, previous, f) for f in findings]
    joined = [r for r in static_rows if r.kernel in by_kernel]
    for row in joined:
        add_event(cur, by_kernel[row.kernel], ACTOR, f"static: {row.suspicion}")
    rows += [_joined(r, by_kernel[r.kernel]) for r in joined]
    alone = [r for r in static_rows if r.kernel not in by_kernel]
    if alone:
        regression_id = _open_static(cur, tonight, previous, alone)
        opened.append((regression_id, "static"))
        rows += [_joined(r, regression_id) for r in alone]
    insert_suspects(cur, tonight.suite, rows)
    return NightReport(
        suspects=tuple(_line(r) for r in rows),
        opened=tuple(opened),
        gpu_seconds=sum(c.gpu_seconds for c in confirmed),
    )


def _open_timing(
    cur: psycopg.Cursor, tonight: NightRun, group: Sequence[Confirmed[TimingSuspect]]
) -> int:
    ids = insert_change_points(cur, CONFIRM_DETECTOR, [_change_point(c) for c in group])
    worst = max(group, key=lambda c: c.verdict.ratio if c.verdict else 0.0)
    assert worst.verdict is not None
    kernels = sorted({c.suspect.series.kernel for c in group})
    base = worst.suspect.base
    configs = Counter(
        "autotune" if c.suspect.base.config != c.suspect.tonight.config else "code" for c in group
    )
    title = (
        f"{', '.join(kernels)}: {100 * (worst.verdict.ratio - 1):+.1f}% "
        f"({len(group)} series; worst {worst.suspect.label()})"
    )
    note = (
        f"opened the night it landed: an A/B of {(base.commit_sha or '?')[:12]} against "
        f"{tonight.sha[:12]} on this device is SLOWER in {len(group)} series (worst "
        f"{worst.verdict.ratio:.3f}x, interval {worst.verdict.ci_low:.3f}-"
        f"{worst.verdict.ci_high:.3f})"
    )
    return open_regression(
        cur,
        tonight.repository_id,
        NewRegression(
            title=title,
            cause=configs.most_common(1)[0][0],
            magnitude=worst.verdict.ratio - 1,
            good_commit_id=base.commit_id,
            bad_commit_id=tonight.commit_id,
            change_point_ids=tuple(ids),
            kind="timing",
            opened_by="confirmation",
            note=note,
        ),
        ACTOR,
    )


def _open_correctness(
    cur: psycopg.Cursor, tonight: NightRun, previous: NightRun | None, failing: Sequence[SuspectRow]
) -> int:
    kernels = sorted({r.kernel for r in failing})
    first = failing[0]
    title = (
        f"{', '.join(kernels)}: fails its correctness check ({len(failing)} cases; "
        f"{first.case_label} {first.dtype})"
    )
    return _open_deterministic(cur, tonight, previous, "correctness", title, first.suspicion)


def _open_static(
    cur: psycopg.Cursor, tonight: NightRun, previous: NightRun | None, rows: Sequence[SuspectRow]
) -> int:
    first = rows[0]
    more = f" (and {len(rows) - 1} more)" if len(rows) > 1 else ""
    title = f"{first.kernel}: {first.note}{more}"
    return _open_deterministic(cur, tonight, previous, "static", title, first.suspicion)


def _open_deterministic(
    cur: psycopg.Cursor,
    tonight: NightRun,
    previous: NightRun | None,
    kind: str,
    title: str,
    why: str,
) -> int:
    return open_regression(
        cur,
        tonight.repository_id,
        NewRegression(
            title=title,
            cause="code",
            magnitude=None,
            good_commit_id=previous.commit_id if previous else None,
            bad_commit_id=tonight.commit_id,
            change_point_ids=(),
            kind=kind,
            opened_by="confirmation",
            note=f"opened the night it landed, against the previous nightly head: {why}",
        ),
        ACTOR,
    )


def _change_point(c: Confirmed[TimingSuspect]) -> NewChangePoint:
    s = c.suspect
    assert c.verdict is not None
    onset = s.series.runs[s.onset]
    after = float(np.median([_level(r) for r in s.series.runs[s.onset :] if r.samples_ns]))
    return NewChangePoint(
        series_id=s.series.series_id,
        measurement_id=onset.measurement_id,
        commit_id=onset.commit_id,
        at=onset.measured_at,
        before_ns=math.exp(s.found.level),
        after_ns=after,
        rel_change=c.verdict.ratio - 1.0,
        p_value=c.verdict.p_value,
        direction="regression" if c.verdict.verdict == "SLOWER" else "improvement",
    )


def _timing_row(
    tonight: NightRun, c: Confirmed[TimingSuspect], regression_id: int | None
) -> SuspectRow:
    s, v = c.suspect, c.verdict
    found = s.found
    suspicion = (
        f"{math.expm1(found.shift):+.1%} against the median of {found.reference} nights "
        f"({found.z:.1f} sigma) over {found.points} night(s)"
    )
    return SuspectRow(
        run_pk=tonight.pk,
        repository_id=tonight.repository_id,
        kind="timing",
        kernel=s.series.kernel,
        case_label=case_key(
            {"kernel": s.series.kernel, "params": s.series.params, "dtype": s.series.dtype}
        )[1],
        dtype=s.series.dtype,
        head_commit_id=tonight.commit_id,
        base_commit_id=s.base.commit_id,
        series_id=s.series.series_id,
        measurement_id=s.tonight.measurement_id,
        severity=abs(found.shift),
        suspicion=suspicion,
        verdict=v.verdict if v else None,
        ratio=v.ratio if v else None,
        ci_low=v.ci_low if v else None,
        ci_high=v.ci_high if v else None,
        p_value=v.p_value if v else None,
        samples=(v.n_a + v.n_b) if v else 0,
        rounds=c.rounds,
        gpu_seconds=c.gpu_seconds,
        outcome=c.outcome,
        regression_id=regression_id if c.outcome == "regression" else None,
        note=c.note,
    )


def _static_row(tonight: NightRun, previous: NightRun | None, f: Finding) -> SuspectRow:
    return SuspectRow(
        run_pk=tonight.pk,
        repository_id=tonight.repository_id,
        kind="static",
        kernel=f.kernel,
        case_label=f"{f.function} {f.arch} {f.case}".strip(),
        dtype=f.dtype,
        head_commit_id=tonight.commit_id,
        base_commit_id=previous.commit_id if previous else None,
        suspicion=f"{f.rule} on {f.arch}: {f.before} -> {f.after}",
        outcome="regression",
        note=f"{f.message} ({f.function} on {f.arch})",
    )


def _joined(row: SuspectRow, regression_id: int) -> SuspectRow:
    return dataclasses.replace(row, regression_id=regression_id)


def _line(row: SuspectRow) -> SuspectLine:
    what = f"{row.kernel} {row.case_label} {row.dtype}"
    return SuspectLine(row.kind, what, row.outcome, row.note or row.suspicion, row.regression_id)
