"""The PR comment: a headline verdict, the cases slower and faster beyond noise, static
regressions, correctness failures at head, and a pointer to the full report, in GitHub
markdown that never exceeds the comment size limit.

When everything does not fit, rows are kept in order of importance (slower cases first,
worst first) and each table that lost rows says how many were left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from kernelwatch.report import format as fmt
from kernelwatch.report.compare import UNTIMED, CaseComparison, Comparison
from kernelwatch.store.report_queries import CorrectnessRow

#: GitHub refuses a comment body longer than this many characters.
GITHUB_LIMIT = 65536
#: The first line of every comment: the PR workflow finds its earlier comment by it and reads
#: the outcome from it.
MARKER = "<!-- kernelwatch:pr-check outcome={outcome} -->"
_CELL_MAX = 160
#: Rows every table keeps before any table gets more, when not everything fits.
_FIRST_ROWS = 10
#: Text that renders as itself: no mention, link, image, emphasis or HTML can be made of it.
_PLAIN = re.compile(r"[A-Za-z0-9 _.,:;=+\-/%()\[\]\\\u00d7\u2192\u00b1\u2026\u00b5]*")
_CUT = "\n\n_(comment cut to fit GitHub's size limit; see the full report)_\n"


@dataclass(frozen=True)
class _Table:
    title: str
    noun: str
    columns: tuple[str, ...]
    rows: tuple[str, ...]

    def header(self) -> str:
        line = "| " + " | ".join(self.columns) + " |\n"
        return (
            f"\n#### {self.title} ({len(self.rows)})\n\n"
            + line
            + "|---" * len(self.columns)
            + "|\n"
        )

    def note(self, left_out: int) -> str:
        return f"\n_…and {left_out} more {self.noun} not shown: see the full report._\n"


def pr_comment(
    comparison: Comparison,
    report_link: str | None = None,
    limit: int = GITHUB_LIMIT,
    device: str | None = None,
) -> str:
    """The markdown comment for a PR check, at most ``limit`` characters long; ``device``:
    what it cost (:func:`device_line`)."""
    head = _headline(comparison)
    tail = _tail(comparison, report_link, device)
    return _fit(head, _tables(comparison), tail, limit)


def device_line(
    device_s: float, pool: str, gpus: int, gpu_hour: float | None, currency: str
) -> str:
    """What a check's device time cost: its seconds, the GPU-hours they are on ``pool``
    (whose runs hold ``gpus`` GPUs each) and, where the pool is priced, their price."""
    hours = device_s * gpus / 3600.0
    price = "" if gpu_hour is None else f", {hours * gpu_hour:.2f} {currency}"
    held = f", {gpus} GPUs a run" if gpus > 1 else ""
    return f"Device time: {device_s:.0f} s on pool {pool}{held}: {hours:.3f} GPU-hours{price}."


def merge_verdict(c: Comparison) -> str:
    """The comment's verdict in words, as its headline gives it (and the PR dashboard)."""
    if c.outcome == 2:
        return f"could not compare this PR: {c.problem}"
    untimed = _count(len(c.untimed), "case", "cases") + " " + UNTIMED if c.untimed else ""
    if c.outcome == 1:
        found = [
            _count(len(c.slower), "case slower", "cases slower"),
            _count(len(c.static), "static regression", "static regressions"),
            _count(len(c.correctness_failures), "correctness failure", "correctness failures"),
        ]
        return ", ".join(f for f in (*found, untimed) if f)
    faster = f" ({len(c.faster)} faster)" if c.faster else ""
    # An unsettled case is no verdict: "no regression" above it would read as one.
    ambiguous = len(c.with_verdict("AMBIGUOUS"))
    if ambiguous:
        verdict = (
            f"{_count(ambiguous, 'case inconclusive', 'cases inconclusive')}, none slower{faster}"
        )
    elif c.untimed and not c.cases:
        return f"no kernel changed: {untimed}"
    else:
        verdict = f"no regression{faster}"
    return f"{verdict}; {untimed}" if untimed else verdict


def _headline(c: Comparison) -> str:
    lines = [MARKER.format(outcome=c.outcome)]
    if c.outcome == 2:  # the problem may quote the pull request's own text
        lines.append(f"### ⚠️ kernelwatch could not compare this PR: {_text(c.problem)}")
    else:
        verdict = merge_verdict(c)  # counts and words of ours only
        mark = {1: "❌", 3: "⚠️"}.get(c.outcome, "✅")
        lines.append(f"### {mark} kernelwatch: {verdict}")
    device = c.head.device
    lines.append(
        f"`{fmt.sha(c.base.commit_sha)}` → `{fmt.sha(c.head.commit_sha)}` on {_text(device.name)} "
        f"({_text(device.host)}) · {len(c.cases)} cases compared"
        + (f" · {len(c.untimed)} not timed (identical build)" if c.untimed else "")
        + " · verdicts at "
        f"±{c.verdict_config.margin:.1%} with {c.verdict_config.confidence:.0%} CIs"
    )
    lines.extend(f"> {_text(note)}" for note in c.notes)
    return "\n".join(lines) + "\n"


def _tables(c: Comparison) -> list[_Table]:
    case_columns = ("kernel", "case", "dtype", "ratio", "95% CI", "base", "head")
    return [
        _Table("Slower", "slower cases", case_columns, tuple(_case_row(x) for x in c.slower)),
        _checks("Correctness failures at head", "correctness failures", c.correctness_failures),
        _checks(
            "Already failing at base (not counted)", "cases failing at base too", c.already_failing
        ),
        _Table(
            "Static regressions",
            "static regressions",
            ("kernel", "function", "arch", "dtype", "rule", "before → after", "what"),
            tuple(
                _row(
                    s.kernel,
                    s.function,
                    s.arch,
                    s.dtype,
                    s.rule,
                    f"{s.before} → {s.after}",
                    s.message,
                )
                for s in c.static
            ),
        ),
        _Table(
            "Not compared",
            "cases not compared",
            ("kernel", "case", "dtype", "why"),
            tuple(
                _row(x.head.kernel, x.head.case_label, x.head.dtype, x.problem) for x in c.errored
            ),
        ),
        _Table("Faster", "faster cases", case_columns, tuple(_case_row(x) for x in c.faster)),
    ]


def _checks(title: str, noun: str, rows: tuple[CorrectnessRow, ...]) -> _Table:
    columns = ("kernel", "case", "dtype", "verdict", "reason")
    return _Table(
        title,
        noun,
        columns,
        tuple(_row(f.kernel, f.case_label, f.dtype, f.verdict, f.reason) for f in rows),
    )


def _tail(c: Comparison, report_link: str | None, device: str | None = None) -> str:
    same = len(c.with_verdict("SAME"))
    ambiguous = len(c.with_verdict("AMBIGUOUS"))
    parts = [f"{same} cases the same within ±{c.verdict_config.margin:.1%}"]
    if ambiguous:
        parts.append(f"{ambiguous} still ambiguous after the extra samples [pr] allowed")
    if c.only_base:
        parts.append(f"{len(c.only_base)} only at base")
    if c.only_head:
        parts.append(f"{len(c.only_head)} only at head")
    lines = ["", "; ".join(parts) + "."]
    if device:
        lines.append(device)
    if report_link:
        lines.append(f"Full report: {report_link}")
    else:
        base, head = fmt.sha(c.base.commit_sha), fmt.sha(c.head.commit_sha)
        lines.append(f"Full report: `kernelwatch report --compare {base} {head} --out DIR`")
    return "\n" + "\n".join(lines) + "\n"


def _fit(head: str, tables: Sequence[_Table], tail: str, limit: int) -> str:
    tables = [t for t in tables if t.rows]
    # Every table's header and its worst-case "left out" note are reserved first. Rows then
    # fill what is left in order of importance: the first few of every table, so a static
    # regression is not crowded out by a thousand slower cases, then the rest.
    fixed = len(head) + len(tail) + sum(len(t.header()) + len(t.note(len(t.rows))) for t in tables)
    budget = limit - fixed
    if budget < 0:
        return _cut(head + "".join(t.header() for t in tables) + tail, limit)
    shown = [0] * len(tables)
    for floor in (_FIRST_ROWS, None):
        for i, table in enumerate(tables):
            cap = len(table.rows) if floor is None else min(floor, len(table.rows))
            while shown[i] < cap and len(table.rows[shown[i]]) <= budget:
                budget -= len(table.rows[shown[i]])
                shown[i] += 1
    out = [head]
    for table, count in zip(tables, shown, strict=True):
        out += [table.header(), *table.rows[:count]]
        if count < len(table.rows):
            out.append(table.note(len(table.rows) - count))
    out.append(tail)
    return "".join(out)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    if limit <= len(_CUT):
        return text[:limit]
    return text[: limit - len(_CUT)] + _CUT


def _case_row(x: CaseComparison) -> str:
    v = x.verdict
    return _row(
        x.head.kernel,
        x.head.case_label,
        x.head.dtype,
        fmt.ratio(v.ratio if v else None),
        fmt.interval(v.ci_low if v else None, v.ci_high if v else None),
        fmt.duration(x.base.median_ns),
        fmt.duration(x.head.median_ns),
    )


def _row(*cells: str) -> str:
    return "| " + " | ".join(_text(_clip(cell)) for cell in cells) + " |\n"


def _clip(value: str) -> str:
    return value if len(value) <= _CELL_MAX else value[: _CELL_MAX - 1] + "…"


def _text(value: object) -> str:
    """Untrusted text (kernel names, parameters, errors, device names) as one inline code
    span: on one line, with no column separator, and nothing in it rendered, so no mention,
    link, image or HTML a pull request's kernels put there reaches the bot's comment."""
    flat = " ".join(str(value).split()).replace("|", "\\|")
    if _PLAIN.fullmatch(flat) and not any(m in flat.lower() for m in ("](", "://", "www.")):
        return flat  # numbers, names and labels that cannot form markup read better plain
    # A fence longer than any run of backticks inside; padded when the text touches one.
    fence = "`" * (max((len(run) for run in re.findall(r"`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return f"{fence}{pad}{flat}{pad}{fence}"


def error_comment(message: str) -> str:
    """The comment of a PR check that could not run: its outcome marker and ``message``
    (untrusted: it may quote the suite's own error) as inline code."""
    return f"{MARKER.format(outcome=2)}\n# pr check could not run\n\n{_text(message)}\n"


def _count(n: int, one: str, many: str) -> str:
    return "" if n == 0 else f"{n} {one if n == 1 else many}"
