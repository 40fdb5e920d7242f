"""Render the evaluation tables in docs/ from the results JSON the evaluation scripts commit
beside them (docs/results/), and check that the pages hold what the JSON says.

A rendered block in a page sits between two markers naming its table and its results file:

    <!-- results: detection-summary docs/results/detection.json -->
    ...the table, as this script renders it...
    <!-- /results -->

    .venv/bin/python scripts/docs_results.py          # exit 1 naming every stale block
    .venv/bin/python scripts/docs_results.py --write  # re-render the blocks in place

The evaluations themselves are not re-run here (minutes to an hour); the scripts that write
the JSON print the same tables.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(
    r"(<!-- results: (?P<table>[\w-]+) (?P<source>\S+) -->\n)(?P<body>.*?)(<!-- /results -->)",
    re.S,
)
NAMES = {
    "ours": "kernelwatch",
    "otava": "Otava",
    "mongo": "e_divisive",
    "ruptures": "ruptures PELT",
}


def _setting(params: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


#: DetectorConfig fields that do not act on the evaluation's batch scan.
_NOT_SCAN = ("tail_points", "tail_z", "lower_is_better")


def _shown(row: dict[str, Any], details: dict[str, Any]) -> str:
    if row["detector"] == "ours" and row["which"] == "default":
        defaults = details["ours_defaults"]
        return _setting({k: v for k, v in defaults.items() if k not in _NOT_SCAN})
    return _setting(row["params"]) or "signature defaults"


def detection_full(details: dict[str, Any]) -> str:
    """Every detector at its documented defaults and its tuned setting (docs/BENCHMARKS.md)."""
    lines = [
        f"{details['series']} series x {details['length']} points (seed {details['seed']}; "
        f"{details['changes']} planted changes, {details['unchanged']} unchanged series); tuned "
        f"on {details['tune_series']} series (seed {details['tune_seed']}); match within "
        f"+-{details['tolerance']} points",
        "",
        "| detector | setting | precision | recall | F1 | false alarms | ms / series |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in details["rows"]:
        s = row["scores"]
        lines.append(
            f"| {NAMES[row['detector']]} {row['which']} | {_shown(row, details)} | "
            f"{s['precision']:.3f} | {s['recall']:.3f} | {s['f1']:.3f} | "
            f"{s['false_alarm_rate']:.1%} | {row['ms_per_series']:.2f} |"
        )
    return "\n".join(lines)


def detection_shapes(details: dict[str, Any]) -> str:
    """Every detector on the shaped nightly series (docs/DETECTION.md, docs/BENCHMARKS.md)."""
    shapes = details["shapes"]
    named = shapes["ours_named"]  # by shape, in the evaluation's order
    lines = [
        f"{shapes['series']} series of each shape (seed {shapes['seed']}; 1 % nightly noise, 2 % "
        "interference outliers): a drift of +0.5 %/night for 20 nights, a 10 % step on such a "
        "drift, +10 % then -6 % four nights later; match within "
        f"+-{shapes['tolerance']} points",
        "",
        "| detector | drift: one or two findings, one at its start | step on a drift found | "
        "partial revert: both changes found |",
        "|---|---|---|---|",
    ]
    for row in shapes["rows"]:
        cells = " | ".join(f"{row[shape]:.0%}" for shape in named)
        lines.append(f"| {NAMES[row['detector']]} {row['which']} | {cells} |")
    cells = " | ".join(f"{share:.0%}" for share in named.values())
    lines.append(f"| kernelwatch default, as it names them (a drift; steps) | {cells} |")
    return "\n".join(lines)


def detection_summary(details: dict[str, Any]) -> str:
    """Ours at its defaults, each anchor at the better (by F1) of its two settings, best
    first (docs/DETECTION.md)."""
    best: dict[str, dict[str, Any]] = {}
    for row in details["rows"]:
        if row["detector"] == "ours":
            if row["which"] == "default":
                best["ours"] = row
            continue
        held = best.get(row["detector"])
        if held is None or row["scores"]["f1"] > held["scores"]["f1"]:
            best[row["detector"]] = row
    lines = [
        "| detector (anchors: the better of default and tuned) | F1 | false alarms | ms / series |",
        "|---|---|---|---|",
    ]
    for row in sorted(best.values(), key=lambda r: -r["scores"]["f1"]):
        label = (
            "kernelwatch (defaults)"
            if row["detector"] == "ours"
            else f"{NAMES[row['detector']]} ({row['which']}: {_shown(row, details)})"
        )
        s = row["scores"]
        lines.append(
            f"| {label} | {s['f1']:.3f} | {s['false_alarm_rate']:.1%} | "
            f"{row['ms_per_series']:.1f} |"
        )
    return "\n".join(lines)


def detection_tuning(details: dict[str, Any]) -> str:
    """What the tuning set says about the defaults (docs/DETECTION.md)."""
    on_tuning = details["ours_defaults_on_tuning_set"]
    tuned = next(r for r in details["rows"] if r["detector"] == "ours" and r["which"] == "tuned")
    return (
        f"On the tuning set (seed {details['tune_seed']}) the defaults score F1 "
        f"{on_tuning['f1']:.3f}; {details['ours_grid_points_beating_defaults_on_tuning_set']} of "
        f"the {details['ours_grid_points']} grid points score higher there, the best being "
        f"{_setting(tuned['params'])}, which scores F1 {tuned['scores']['f1']:.3f} on the "
        f"evaluation set (seed {details['seed']})."
    )


def short_history(details: dict[str, Any]) -> str:
    """Miss and false-alarm rates of settings on short histories (docs/FLOWS.md)."""
    lines = [
        f"| alpha | min_size | nights before/after | miss | false alarms per unchanged series "
        f"({details['noise']:.0%} noise) |",
        "|---|---|---|---|---|",
    ]
    for row in details["rows"]:
        lines.append(
            f"| {row['alpha']:g} | {row['min_size']} | {row['before']}/{row['after']} | "
            f"{row['miss']:.1%} | {row['false_alarms']:.1%} |"
        )
    return "\n".join(lines)


def short_history_latency(details: dict[str, Any]) -> str:
    """How many nights after it lands the defaults report a step (docs/FLOWS.md)."""
    parts = []
    for step, nights in details["latency"].items():
        seen = sorted(n for n in nights if n is not None)
        missed = len(nights) - len(seen)
        median = seen[len(seen) // 2]
        text = f"a {step}x step {seen[0]} to {seen[-1]} nights after it lands (median {median})"
        if missed:
            text += f", {missed} not within {details['latency_max']} nights"
        parts.append(text)
    return (
        f"With the fleet defaults and {details['latency_before']} nights before the change, "
        f"the net reports {' and '.join(parts)} ({details['latency_trials']} trials each at "
        f"{details['latency_noise']:.0%} noise, seed {details['seed']})."
    )


def detector_cases(details: dict[str, Any]) -> str:
    """False alarms and 3 % steps found at the defaults (docs/DETECTION.md)."""
    alarms = details["false_alarms"]
    per_seed = ", ".join(f"{rate:.1%} (seed {seed})" for seed, rate in alarms.items())
    found = details["steps_found"]
    per_jitter = ", ".join(
        f"{count} at {float(jitter):.1%} jitter" for jitter, count in found.items()
    )
    return "\n".join(
        [
            f"- **False alarms**: of {details['alarm_series']:,} unchanged 200-point series, "
            f"{per_seed} raise any change.",
            f"- **3 % steps** with the full noise model, 40+ points either side: found within "
            f"+-2 commits (and nothing else found) in {per_jitter}, of "
            f"{details['step_series']} series each.",
        ]
    )


#: The delay table's columns: points after the step.
DELAY_COLUMNS = (1, 2, 3, 4, 10)


def _delay_cells(row: dict[str, Any], columns: tuple[int, ...]) -> list[str]:
    return [f"{shares[d - 1]:.1%}" for shares in row["reported"].values() for d in columns]


def delay_full(details: dict[str, Any]) -> str:
    """How soon each detector reports a step (docs/BENCHMARKS.md)."""
    sizes = list(details["rows"][0]["reported"])
    head = " | ".join(f"{k}x: <= {d}" for k in sizes for d in DELAY_COLUMNS)
    lines = [
        f"{details['stepped']} stepped series ({details['per_size']} per size, up and down "
        f"alternately) and {details['unchanged']} unchanged ones, {details['points']} points, "
        f"{details['noise']:.0%} noise with interference outliers (seed {details['seed']}); "
        f"reported = a change within +-{details['tolerance']} points of the step",
        "",
        f"| detector | setting | {head} | unchanged with a report | ms / call |",
        "|---|---|" + "---|" * (len(sizes) * len(DELAY_COLUMNS) + 2),
    ]
    for row in details["rows"]:
        cells = " | ".join(_delay_cells(row, DELAY_COLUMNS))
        lines.append(
            f"| {row['label']} | {_setting(row['params']) or 'defaults'} | {cells} | "
            f"{row['false_alarms']:.1%} | {row['ms_per_call']:.2f} |"
        )
    return "\n".join(lines)


def delay_summary(details: dict[str, Any]) -> str:
    """Our detector's delay at 2 to 4 points after the step (docs/DETECTION.md)."""
    sizes = list(details["rows"][0]["reported"])
    columns = (2, 3, 4)
    head = " | ".join(f"{k}x noise, {d} after" for k in sizes for d in columns)
    lines = [
        f"| detector | {head} | unchanged {details['points']}-point series with any report |",
        "|---|" + "---|" * (len(sizes) * len(columns) + 1),
    ]
    for row in details["rows"]:
        if row["label"].startswith("kernelwatch"):
            cells = " | ".join(_delay_cells(row, columns))
            lines.append(f"| {row['label']} | {cells} | {row['false_alarms']:.1%} |")
    return "\n".join(lines)


def delay_curve(details: dict[str, Any]) -> str:
    """Our detector at every lag after a step, each on its own night (docs/DETECTION.md)."""
    lags = len(next(iter(details["rows"][0]["reported"].values())))
    lines = [
        f"{details['per_lag']} series per lag and step size, {details['points']} points, "
        f"{details['noise']:.0%} noise with interference outliers; reported = a change within "
        f"+-{details['tolerance']} points of the step on that night; stays = of the series "
        f"reported within {details['first']} nights, those reported on every night after",
        "",
        "| detector | seed | step | "
        + " | ".join(f"{d}" for d in range(1, lags + 1))
        + " | stays | unchanged with a report |",
        "|---|---|---|" + "---|" * (lags + 2),
    ]
    for row in details["rows"]:
        for size, shares in row["reported"].items():
            cells = " | ".join(f"{share:.1%}" for share in shares)
            lines.append(
                f"| {row['label']} | {row['seed']} | {size}x | {cells} | "
                f"{row['stays'][size]:.1%} | {row['false_alarms']:.1%} |"
            )
    return "\n".join(lines)


#: Mutation outcomes -> their columns (scripts/mutation_report.py counts them per module).
MUTATION_COLUMNS = {
    "killed": "killed by a test",
    "timed out": "killed by the timeout",
    "survived": "survived",
    "not judged": "not judged",
}
_Z95 = 1.96


def mutation_scores(details: dict[str, Any]) -> str:
    """The share of mutants killed per module and per package (docs/TESTING.md)."""
    head = " | ".join(
        ("mutants", "run", *MUTATION_COLUMNS.values(), "killed share (95 % interval if sampled)")
    )
    rule = "|---" * (len(MUTATION_COLUMNS) + 4) + "|"
    modules: dict[str, dict[str, int]] = details["modules"]
    lines = [f"| module | {head} |", rule]
    lines += [f"| {m} | {_mutation_cells([c])} |" for m, c in sorted(modules.items())]
    packages: dict[str, list[dict[str, int]]] = {}
    for module, counts in modules.items():
        packages.setdefault(module.split("/")[0], []).append(counts)
    lines += ["", f"| package | {head} |", rule]
    lines += [f"| {p} | {_mutation_cells(cs)} |" for p, cs in sorted(packages.items())]
    return "\n".join(lines)


def _mutation_cells(modules: list[dict[str, int]]) -> str:
    run = [sum(c.get(k, 0) for k in MUTATION_COLUMNS) for c in modules]
    counts = [sum(c.get(k, 0) for c in modules) for k in MUTATION_COLUMNS]
    total = sum(run) + sum(c.get("not sampled", 0) for c in modules)
    return " | ".join(str(n) for n in (total, sum(run), *counts)) + f" | {_killed_share(modules)}"


def _killed_share(modules: list[dict[str, int]]) -> str:
    """The share of the judged mutants killed, each module weighted by its mutants (a
    stratified estimate), with a normal-approximation interval where some were not sampled.
    Mutants not judged tested nothing and are left out, as cosmic-ray leaves incompetent ones
    out of its rate."""
    strata = []
    for c in modules:
        killed = c.get("killed", 0) + c.get("timed out", 0)
        judged = killed + c.get("survived", 0)
        if judged:
            strata.append((judged + c.get("not sampled", 0), killed / judged, judged))
    if not strata:
        return "-"
    total = sum(population for population, _, _ in strata)
    share = sum(population * p for population, p, _ in strata) / total
    if all(judged == population for population, _, judged in strata):
        return f"{share:.1%}"
    variance = sum(
        (population / total) ** 2 * p * (1 - p) / judged * (1 - judged / population)
        for population, p, judged in strata
    )
    half = _Z95 * variance**0.5
    return f"{share:.1%} ({max(0.0, share - half):.1%} to {min(1.0, share + half):.1%})"


def selfcheck_budget(details: dict[str, Any]) -> str:
    """The GPU self-check's seconds per stage on one H200 (docs/TIMING.md)."""
    lines = [
        "| stage | cases | processes | compiles | compile s | autotune runs | autotune s "
        "| start-up s | sampling s | total s | share s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in details["stages"]:
        lines.append(
            f"| `{row['stage']}` | {row['cases']} | {row['processes']} | {row['compiles']:g} "
            f"| {row['compile_s']:.0f} | {row['autotune_runs']:g} | {row['autotune_s']:.0f} "
            f"| {row['startup_s']:.0f} | {row['sampling_s']:.0f} | **{row['total_s']:.0f}** "
            f"| {row['share_s']:.0f} |"
        )
    lines.append(
        f"| all | | | | | | | | | **{details['total_s']:.0f}** "
        f"| {details['deadline_s']:g} of the script's {details['script_limit_s']} |"
    )
    return "\n".join(lines)


def dashboards_latency(details: dict[str, Any]) -> str:
    """Every dashboard query's latency at fleet scale against its target (docs/BENCHMARKS.md)."""
    rows = details["rows"]
    lines = [
        f"{rows['measurements']:,} measurements, {rows['series']:,} series, {rows['runs']:,} "
        f"runs, {rows['pr_findings']:,} PR findings, {rows['build_metrics']:,} builds; "
        f"built in {details['populate_s']:.0f} s, peak RSS {details['peak_rss_mb']:,} MB; load "
        f"{details['load_before'][0]:.2f} before the timing, {details['load_after'][0]:.2f} "
        f"after; {details['repeats']} calls per query after a warm-up",
        "",
        "| query | rows | p50 ms | p95 ms | target p95 ms | met |",
        "|---|---:|---:|---:|---:|---|",
    ]
    met = judged = 0
    for name, q in details["queries"].items():
        timing = f"| {name} | {q['rows']} | {q['p50_ms']:.1f} | {q['p95_ms']:.1f} |"
        target = q["target_ms"]
        if target is None:  # a cascade: the variable queries below it, one after another
            lines.append(f"{timing} (its queries') | |")
            continue
        ok = q["p95_ms"] <= target
        met, judged = met + ok, judged + 1
        lines.append(f"{timing} {target:g} | {'yes' if ok else '**no**'} |")
    lines += ["", f"{met} of {judged} queries met their target."]
    return "\n".join(lines)


def pr_scope(details: dict[str, Any]) -> str:
    """A PR check's device seconds: a full check against a one-kernel and a docs-only head
    (docs/BENCHMARKS.md)."""
    rows = details["rows"]
    full = rows["full check (--all)"]["device_s"]
    lines = [
        "| check | kernels timed | cases timed | cases identical, not timed | device s "
        "| of the full check |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        share = row["device_s"] / full if full else 0.0
        lines.append(
            f"| {name} | {row['kernels_timed']} of {row['kernels']} | {row['cases_timed']} "
            f"| {row['cases_identical']} | {row['device_s']:.1f} | {share:.1%} |"
        )
    return "\n".join(lines)


def build_stage(details: dict[str, Any]) -> str:
    """The build stage cold, unchanged and with one kernel changed, each as a share of the
    cold build's wall time (docs/BENCHMARKS.md)."""
    rows = details["rows"]
    cold = rows["cold"]["wall_s"]
    lines = [
        "| build | builds | compiled | from the cache or memo | errors | wall s | of cold |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['builds']} | {row['compiled']} | {row['cached']} | {row['errors']} "
            f"| {row['wall_s']:.1f} | {row['wall_s'] / cold:.1%} |"
        )
    return "\n".join(lines)


RENDERERS: dict[str, Callable[[dict[str, Any]], str]] = {
    "build-stage": build_stage,
    "dashboards-latency": dashboards_latency,
    "detection-full": detection_full,
    "detection-summary": detection_summary,
    "detection-shapes": detection_shapes,
    "detection-tuning": detection_tuning,
    "short-history": short_history,
    "short-history-latency": short_history_latency,
    "detector-cases": detector_cases,
    "delay-full": delay_full,
    "delay-summary": delay_summary,
    "delay-curve": delay_curve,
    "mutation-scores": mutation_scores,
    "pr-scope": pr_scope,
    "selfcheck-budget": selfcheck_budget,
}


def render_page(text: str, root: Path = ROOT) -> str:
    """``text`` with every marked block re-rendered from its results file."""

    def one(match: re.Match[str]) -> str:
        table = match["table"]
        if table not in RENDERERS:
            raise ValueError(f"unknown results table {table!r}; known: {', '.join(RENDERERS)}")
        details = json.loads((root / match["source"]).read_text())
        return f"{match[1]}{RENDERERS[table](details)}\n{match[5]}"

    return BLOCK.sub(one, text)


def stale_blocks(root: Path = ROOT) -> list[str]:
    """The pages under ``root/docs`` whose marked blocks differ from their results files."""
    return [
        str(page.relative_to(root))
        for page in sorted((root / "docs").glob("*.md"))
        if render_page(page.read_text(), root) != page.read_text()
    ]


def main() -> None:
    """Check the pages, or re-render them with --write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="re-render the blocks in place")
    args = parser.parse_args()
    stale = stale_blocks()
    if args.write:
        for name in stale:
            page = ROOT / name
            page.write_text(render_page(page.read_text()))
        return
    if stale:
        sys.exit(f"stale results blocks in {', '.join(stale)}: run scripts/docs_results.py --write")


if __name__ == "__main__":
    main()
