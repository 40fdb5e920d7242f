"""Evaluate kernelwatch's change-point detector against Apache Otava, MongoDB's e_divisive
and ruptures PELT on labelled synthetic series with GPU-like noise, in one run.

    .venv/bin/python scripts/eval_detection.py --anchors /tmp/kw-anchors

Each anchor runs in its own virtual environment (their numpy pins conflict), as a
subprocess worker (scripts/detection_anchor_worker.py) that returns its detections and the
time spent inside its own calls. Every detector is first tuned on series drawn from
``--tune-seed``, then all run, interleaved chunk by chunk, on series drawn from ``--seed``:
at its documented defaults and at its tuned setting. A detection matches a planted change
within +-3 points (one to one). Prints a Markdown table; ``--json`` also writes the details.

``--delay`` measures instead how soon each detector reports a step once it has landed: on
60-point histories with 1 % multiplicative noise and interference outliers (no autotune
flips, no throttling bursts), a step of 5x and of 10x the noise after point 50, each
detector run on every prefix that ends 1..10 points after the step (ours with its
provisional tail, and with settled changes only; the anchors at their tuned settings of the
main evaluation), and the share of unchanged 60-point series with any detection.

``--delay-curve`` measures ours alone at every lag 1..14, each lag on its own night (a
change reported one night and gone the next counts as missed on that night), on the
``--seeds`` given, with whether a step reported within 3 nights stays reported after.

The main evaluation also runs every detector (ours at its defaults, each anchor at its
tuned setting) on shaped nightly series drawn from ``--seed`` (``tests/synthetic_series.py``'s
``shaped``): a slow drift, a step on a drift and a partial revert.

The anchors live outside the repository, each in a virtual environment of its own under
``--anchors``, which the script makes and installs (``ANCHOR_PACKAGES``, pinned) when one is
missing; by hand that is:

    python3.11 -m venv DIR/otava && DIR/otava/bin/pip install apache-otava==0.8.0
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import docs_results
import numpy as np

from kernelwatch.analysis.changepoints import DetectorConfig, detect

# The synthetic generators are test data: they live in tests/, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_series import (
    SHAPES,
    NoiseModel,
    Shaped,
    SyntheticSeries,
    make_dataset,
    make_series,
    shaped,
)

TOLERANCE = 3
CHUNK = 50
WORKER = Path(__file__).with_name("detection_anchor_worker.py")
#: Each anchor's package, pinned: the script installs it into ``--anchors``/NAME when missing.
ANCHOR_PACKAGES = {
    "otava": "apache-otava==0.8.0",
    "mongo": "signal-processing-algorithms==2.1.6",
    "ruptures": "ruptures==1.1.10",
}
#: Series of each shape the shaped cases draw.
SHAPE_SERIES = 60

Params = dict[str, Any]
Runner = Callable[[Params, list[list[float]]], tuple[list[list[int]], float]]

# Documented defaults: Otava's compute_change_points signature (window_len=50,
# max_pvalue=0.001, min_magnitude=0); e_divisive's signature (pvalue=0.05,
# permutations=100); ruptures has no default penalty, so its README's example
# (Pelt(model="rbf"), predict(pen=10), constructor defaults min_size=2, jump=5).
DEFAULTS: dict[str, Params] = {
    "ours": {},
    "otava": {},
    "mongo": {},
    "ruptures": {"model": "rbf", "pen": 10},
}


def _grid(**axes: Sequence[Any]) -> list[Params]:
    return [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]


GRIDS: dict[str, list[Params]] = {
    # No min_effect axis: with at most a window a side and no ties, p < alpha already needs
    # |Cliff's delta| > 0.4 at every alpha here, so the effect floor does not decide in the
    # scan (it does on raw samples, record_changes.py). The noise floor does.
    "ours": _grid(
        alpha=[1e-3, 1e-4, 1e-5, 1e-6], window=[20, 25, 30, 40], noise_factor=[0.25, 0.5, 1.0]
    ),
    "otava": _grid(
        window_len=[20, 30, 50],
        max_pvalue=[1e-3, 1e-4, 1e-6, 1e-8, 1e-10],
        min_magnitude=[0.0, 0.01, 0.02],
    ),
    # 100 permutations cannot report p below ~0.01; more permutations buy lower cuts.
    "mongo": [
        {"pvalue": p, "permutations": n}
        for p, n in [(0.1, 100), (0.05, 100), (0.02, 100), (0.01, 100), (0.005, 200)]
    ],
    "ruptures": _grid(model=["rbf"], pen=[5, 10, 20, 40], jump=[1, 5])
    + _grid(model=["l2"], log_standardize=[True], pen=[10, 20, 40, 80], min_size=[5], jump=[1])
    + _grid(model=["l1"], log_standardize=[True], pen=[20, 40], min_size=[5], jump=[1]),
}


@dataclass(frozen=True)
class Scores:
    """Detection quality over a set of series."""

    precision: float
    recall: float
    f1: float
    false_alarm_rate: float
    true_positives: int
    false_positives: int
    false_negatives: int


def score(data: Sequence[SyntheticSeries], detections: Sequence[Sequence[int]]) -> Scores:
    """Match detections to planted changes one to one within +-TOLERANCE points (nearest
    first); unmatched detections are false positives. The false-alarm rate is the share of
    unchanged series with any detection."""
    tp = fp = fn = alarms = unchanged = 0
    for series, found in zip(data, detections, strict=True):
        truth = list(series.change_points)
        matched = _matched(truth, found)
        tp += matched
        fp += len(found) - matched
        fn += len(truth) - matched
        if not truth:
            unchanged += 1
            alarms += bool(found)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, f1, alarms / unchanged if unchanged else 0.0, tp, fp, fn)


def _matched(truth: Sequence[int], found: Sequence[int]) -> int:
    """How many of ``truth`` are matched one to one by ``found`` within +-TOLERANCE points
    (nearest first)."""
    pairs = sorted(
        (abs(t - d), i, j)
        for i, t in enumerate(truth)
        for j, d in enumerate(found)
        if abs(t - d) <= TOLERANCE
    )
    used_t: set[int] = set()
    used_d: set[int] = set()
    for _, i, j in pairs:
        if i not in used_t and j not in used_d:
            used_t.add(i)
            used_d.add(j)
    return len(used_t)


def run_ours(
    params: Params, series: list[list[float]], provisional: bool = False
) -> tuple[list[list[int]], float]:
    """Our detector in this process, timed the way the workers time the anchors."""
    config = DetectorConfig(**params)
    detections = []
    seconds = 0.0
    for y in series:
        start = time.perf_counter()
        found = detect(y, config, provisional=provisional)
        seconds += time.perf_counter() - start
        detections.append([cp.index for cp in found.change_points])
    return detections, seconds


def ensure_anchor(name: str, anchors: Path) -> Path:
    """The Python of ``name``'s virtual environment under ``anchors``, made and its pinned
    package installed first when missing (from the package index)."""
    python = anchors / name / "bin" / "python"
    if python.exists():
        return python
    package = ANCHOR_PACKAGES[name]
    print(f"installing {package} into {anchors / name}...", file=sys.stderr)
    base = shutil.which("python3.11") or sys.executable
    try:
        subprocess.run([base, "-m", "venv", str(anchors / name)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", package], check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        shutil.rmtree(anchors / name, ignore_errors=True)
        sys.exit(f"error: could not install {package} into {anchors / name}: {exc}")
    return python


class Worker:
    """One anchor's detector in a subprocess of its own virtual environment."""

    def __init__(self, name: str, anchors: Path) -> None:
        python = ensure_anchor(name, anchors)
        self.name = name
        self.proc = subprocess.Popen(
            [str(python), str(WORKER), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd="/",
        )

    def __call__(self, params: Params, series: list[list[float]]) -> tuple[list[list[int]], float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"params": params, "series": series}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"error: the {self.name} worker died; run it by hand to see why")
        answer = json.loads(line)
        return answer["detections"], answer["seconds"]

    def close(self) -> None:
        """Close stdin so the worker exits, and wait for it."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def tune(
    runner: Runner, grid: list[Params], data: list[SyntheticSeries]
) -> tuple[Params, Scores, list[float]]:
    """The grid point with the best F1 on ``data`` (ties: the earlier point), and every grid
    point's F1 in grid order."""
    series = [s.y.tolist() for s in data]
    best: tuple[Params, Scores] | None = None
    f1s = []
    for params in grid:
        found, _ = runner(params, series)
        scores = score(data, found)
        f1s.append(scores.f1)
        if best is None or scores.f1 > best[1].f1:
            best = (params, scores)
    assert best is not None
    return best[0], best[1], f1s


def evaluate(
    entries: dict[str, tuple[Runner, Params]], data: list[SyntheticSeries]
) -> dict[str, tuple[Scores, float]]:
    """Run every entry on ``data`` in chunks, rotating the order per chunk so that load from
    other processes falls on all detectors alike; returns scores and ms per series."""
    found: dict[str, list[list[int]]] = {label: [] for label in entries}
    seconds = dict.fromkeys(entries, 0.0)
    labels = list(entries)
    for c, start in enumerate(range(0, len(data), CHUNK)):
        chunk = [s.y.tolist() for s in data[start : start + CHUNK]]
        for label in labels[c % len(labels) :] + labels[: c % len(labels)]:
            runner, params = entries[label]
            detections, spent = runner(params, chunk)
            found[label].extend(detections)
            seconds[label] += spent
    return {
        label: (score(data, found[label]), 1000.0 * seconds[label] / len(data)) for label in labels
    }


def _shape_right(series: Shaped, found: Sequence[int]) -> bool:
    """Whether a detector's findings on one shaped series are what a reader needs: a drift as
    one or two findings, one at its start; a step on a drift found; a partial revert's two
    changes each found (one to one)."""
    if series.shape == "drift":
        assert series.drift_start is not None
        return 1 <= len(found) <= 2 and any(abs(i - series.drift_start) <= TOLERANCE for i in found)
    return _matched(series.steps, found) == len(series.steps)


def _ours_named(series: Shaped) -> bool:
    """Ours as the product reads it: a drift named a drift at its start among at most two
    findings; the step on a drift found as a step; a partial revert's changes both steps."""
    found = detect(series.y).change_points
    steps = [cp.index for cp in found if cp.drift is None]
    if series.shape == "drift":
        assert series.drift_start is not None
        return len(found) <= 2 and any(
            cp.drift is not None and abs(cp.index - series.drift_start) <= TOLERANCE for cp in found
        )
    return _matched(series.steps, steps) == len(series.steps)


def evaluate_shapes(
    entries: dict[str, tuple[Runner, Params]], seed: int, count: int
) -> dict[str, Any]:
    """Every entry on ``count`` series of each shape drawn from ``seed``: the share it got
    right (:func:`_shape_right`); and ours as the product names its findings."""
    rng = np.random.default_rng(seed)
    data = {shape: [shaped(rng, shape) for _ in range(count)] for shape in SHAPES}
    rows = []
    for label, (runner, params) in entries.items():
        row: dict[str, Any] = {"detector": label.split()[0], "which": label.split()[1]}
        row["params"] = params
        for shape, series in data.items():
            found, _ = runner(params, [s.y.tolist() for s in series])
            row[shape] = sum(map(_shape_right, series, found)) / count
        rows.append(row)
    named = {shape: sum(map(_ours_named, series)) / count for shape, series in data.items()}
    return {
        "series": count,
        "seed": seed,
        "tolerance": TOLERANCE,
        "rows": rows,
        "ours_named": named,
    }


#: The delay measurement: points before the step, most points after it, step sizes in
#: multiples of the noise, the noise, and the noise model (no flips or bursts).
DELAY_BEFORE, DELAY_AFTER, DELAY_SIZES, DELAY_NOISE = 50, 10, (5, 10), 0.01
DELAY_MODEL = NoiseModel(flip_series_fraction=0.0, burst_rate=0.0)
#: The anchors' tuned settings of the main evaluation (docs/BENCHMARKS.md, seed 1).
TUNED: dict[str, Params] = {
    "otava": {"window_len": 50, "max_pvalue": 1e-8, "min_magnitude": 0.0},
    "mongo": {"pvalue": 0.005, "permutations": 200},
    "ruptures": {"model": "rbf", "pen": 10, "jump": 1},
}


def delay_series(seed: int, count: int) -> tuple[list[tuple[int, list[float]]], list[list[float]]]:
    """``count`` stepped series per step size (size, 60 points; up and down alternately)
    and ``2 * count`` unchanged 60-point series."""
    rng = np.random.default_rng(seed)
    n = DELAY_BEFORE + DELAY_AFTER
    stepped = []
    for size in DELAY_SIZES:
        for i in range(count):
            y = make_series(rng, n, 0, DELAY_MODEL, jitter=DELAY_NOISE, bursts=False).y.copy()
            y[DELAY_BEFORE:] *= np.exp((1 if i % 2 == 0 else -1) * size * DELAY_NOISE)
            stepped.append((size, y.tolist()))
    flat = [
        make_series(rng, n, 0, DELAY_MODEL, jitter=DELAY_NOISE, bursts=False).y.tolist()
        for _ in range(2 * count)
    ]
    return stepped, flat


def delay(
    runner: Runner, params: Params, stepped: list[tuple[int, list[float]]], flat: list[list[float]]
) -> tuple[dict[int, list[float]], float, float]:
    """Per step size, the share of series whose step is reported (within +-TOLERANCE of it)
    with at most d points after it, d = 1..DELAY_AFTER; the false-alarm share on ``flat``;
    ms per call."""
    prefixes = [y[: DELAY_BEFORE + d] for _, y in stepped for d in range(1, DELAY_AFTER + 1)]
    found, seconds = runner(params, prefixes + flat)
    reported: dict[int, list[float]] = {size: [0.0] * DELAY_AFTER for size in DELAY_SIZES}
    per_size = {size: sum(s == size for s, _ in stepped) for size in DELAY_SIZES}
    for k, (size, _) in enumerate(stepped):
        hits = [
            any(abs(i - DELAY_BEFORE) <= TOLERANCE for i in found[k * DELAY_AFTER + d])
            for d in range(DELAY_AFTER)
        ]
        first = next((d for d, hit in enumerate(hits) if hit), None)
        if first is not None:
            for d in range(first, DELAY_AFTER):
                reported[size][d] += 1.0 / per_size[size]
    alarms = sum(bool(f) for f in found[len(prefixes) :]) / len(flat)
    return reported, alarms, 1000.0 * seconds / len(prefixes + flat)


#: The delay curve: every lag it is read at, and how near the step a report must be.
CURVE_LAGS, CURVE_TOLERANCE, CURVE_POINTS = tuple(range(1, 15)), 2, 60
#: The nights a step has stood by which it must be reported for the "stays reported" share.
CURVE_FIRST = 3


def curve_series(rng: np.random.Generator, lag: int, size: int, up: bool) -> list[float]:
    """A 60-point series whose last ``lag`` points moved by ``size`` noise sigmas (``lag``
    0: unchanged), with the delay measurement's noise."""
    y = make_series(rng, CURVE_POINTS, 0, DELAY_MODEL, jitter=DELAY_NOISE, bursts=False).y.copy()
    if lag:
        y[CURVE_POINTS - lag :] *= np.exp((1 if up else -1) * size * DELAY_NOISE)
    return y.tolist()


def delay_curve(seed: int, count: int, provisional: bool) -> dict[str, Any]:
    """The share of ``count`` series per step size reported (within +-CURVE_TOLERANCE of the
    step) at each lag on its own night, not counted from the first report on: a change
    reported on one night and gone the next counts as missed there. Also the share of
    series reported by lag CURVE_FIRST that stay reported on every night after (each series
    grown one point a night), and the share of unchanged series with any report."""
    rng = np.random.default_rng(seed)

    def found(y: list[float], at: int) -> bool:
        points = detect(y, provisional=provisional).change_points
        return any(abs(cp.index - at) <= CURVE_TOLERANCE for cp in points)

    reported: dict[str, list[float]] = {}
    stays: dict[str, float] = {}
    for size in DELAY_SIZES:
        shares = []
        for lag in CURVE_LAGS:
            at = CURVE_POINTS - lag
            hits = [found(curve_series(rng, lag, size, i % 2 == 0), at) for i in range(count)]
            shares.append(sum(hits) / count)
        reported[str(size)] = shares
        grown = [curve_series(rng, CURVE_LAGS[-1], size, i % 2 == 0) for i in range(count)]
        early = kept = 0
        for y in grown:
            at = CURVE_POINTS - CURVE_LAGS[-1]
            nights = [found(y[: at + lag], at) for lag in CURVE_LAGS]
            if any(nights[:CURVE_FIRST]):
                early += 1
                kept += all(nights[nights.index(True) :])
        stays[str(size)] = kept / early if early else 0.0
    flat = [curve_series(rng, 0, 0, True) for _ in range(2 * count)]
    alarms = sum(bool(detect(y, provisional=provisional).change_points) for y in flat)
    return {"reported": reported, "stays": stays, "false_alarms": alarms / len(flat)}


def main_delay_curve(args: argparse.Namespace) -> None:
    """The delay curve of ours (provisional tail, and settled only), on each seed."""
    rows = [
        {"label": label, "seed": seed, **delay_curve(seed, args.series, provisional)}
        for seed in args.seeds
        for label, provisional in (
            ("kernelwatch (provisional tail)", True),
            ("kernelwatch (settled only)", False),
        )
    ]
    details = {
        "per_lag": args.series,
        "unchanged": 2 * args.series,
        "points": CURVE_POINTS,
        "noise": DELAY_NOISE,
        "tolerance": CURVE_TOLERANCE,
        "first": CURVE_FIRST,
        "rows": rows,
    }
    print(docs_results.delay_curve(details))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2) + "\n")


def main_delay(args: argparse.Namespace) -> None:
    """The delay table: ours (provisional tail, and settled only) and each anchor at its
    tuned setting of the main evaluation."""
    stepped, flat = delay_series(args.seed, args.series)
    entries: dict[str, tuple[Runner, Params]] = {
        "kernelwatch (provisional tail)": (lambda p, s: run_ours(p, s, provisional=True), {}),
        "kernelwatch (settled only)": (run_ours, {}),
    }
    workers = []
    for name, params in TUNED.items():
        workers.append(Worker(name, args.anchors))
        entries[f"{name} tuned"] = (workers[-1], params)
    rows = []
    for label, (runner, params) in entries.items():
        reported, alarms, ms = delay(runner, params, stepped, flat)
        rows.append(
            {
                "label": label,
                "params": params,
                "reported": {str(size): shares for size, shares in reported.items()},
                "false_alarms": alarms,
                "ms_per_call": ms,
            }
        )
    details = {
        "stepped": len(stepped),
        "per_size": args.series,
        "unchanged": len(flat),
        "points": DELAY_BEFORE + DELAY_AFTER,
        "noise": DELAY_NOISE,
        "seed": args.seed,
        "tolerance": TOLERANCE,
        "rows": rows,
    }
    print(docs_results.delay_full(details))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2) + "\n")
    for worker in workers:
        worker.close()


def main() -> None:
    """Tune, evaluate, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--anchors", type=Path, default=Path("/tmp/kw-anchors"))
    parser.add_argument("--series", type=int, default=400, help="evaluation series")
    parser.add_argument("--tune-series", type=int, default=150)
    parser.add_argument("--length", type=int, default=200, help="points per series")
    parser.add_argument("--seed", type=int, default=2, help="seed of the evaluation set")
    parser.add_argument("--tune-seed", type=int, default=1, help="seed of the tuning set")
    parser.add_argument("--json", type=Path, help="also write the details here")
    parser.add_argument(
        "--delay", action="store_true", help="measure how soon a step is reported instead"
    )
    parser.add_argument(
        "--delay-curve",
        action="store_true",
        help="measure ours at every lag 1-14 on its own night, on each of --seeds, instead",
    )
    parser.add_argument(
        "--seeds", type=lambda text: [int(s) for s in text.split(",")], default=[3, 4]
    )
    args = parser.parse_args()
    if args.delay:
        main_delay(args)
        return
    if args.delay_curve:
        main_delay_curve(args)
        return
    if args.seed == args.tune_seed:
        sys.exit("error: tune on another seed than you evaluate on (--tune-seed != --seed)")

    tune_set = make_dataset(args.tune_seed, args.tune_series, args.length)
    eval_set = make_dataset(args.seed, args.series, args.length)
    runners: dict[str, Runner] = {"ours": run_ours}
    workers = [Worker(name, args.anchors) for name in ("otava", "mongo", "ruptures")]
    runners.update({w.name: w for w in workers})

    print(f"tuning on {len(tune_set)} series (seed {args.tune_seed})...", file=sys.stderr)
    with ThreadPoolExecutor(len(runners)) as pool:
        tuned = dict(
            zip(
                runners,
                pool.map(lambda name: tune(runners[name], GRIDS[name], tune_set), runners),
                strict=True,
            )
        )
    entries: dict[str, tuple[Runner, Params]] = {}
    for name, runner in runners.items():
        entries[f"{name} default"] = (runner, DEFAULTS[name])
        entries[f"{name} tuned"] = (runner, tuned[name][0])
    print(f"evaluating on {len(eval_set)} series (seed {args.seed})...", file=sys.stderr)
    results = evaluate(entries, eval_set)
    shaped_entries = {
        label: entry
        for label, entry in entries.items()
        if label == "ours default" or (not label.startswith("ours") and label.endswith("tuned"))
    }
    print(f"shaped cases: {SHAPE_SERIES} series each (seed {args.seed})...", file=sys.stderr)
    shapes = evaluate_shapes(shaped_entries, args.seed, SHAPE_SERIES)
    for worker in workers:
        worker.close()

    defaults_on_tuning = tune(run_ours, [DEFAULTS["ours"]], tune_set)[1]
    details = {
        "series": len(eval_set),
        "length": args.length,
        "seed": args.seed,
        "tune_series": len(tune_set),
        "tune_seed": args.tune_seed,
        "changes": sum(len(s.change_points) for s in eval_set),
        "unchanged": sum(not s.change_points for s in eval_set),
        "tolerance": TOLERANCE,
        "ours_defaults": {
            f.name: getattr(DetectorConfig(), f.name) for f in fields(DetectorConfig)
        },
        "ours_defaults_on_tuning_set": asdict(defaults_on_tuning),
        "ours_grid_points_beating_defaults_on_tuning_set": sum(
            f1 > defaults_on_tuning.f1 for f1 in tuned["ours"][2]
        ),
        "ours_grid_points": len(GRIDS["ours"]),
        "rows": [
            {
                "detector": label.split()[0],
                "which": label.split()[1],
                "params": DEFAULTS[label.split()[0]]
                if label.endswith("default")
                else tuned[label.split()[0]][0],
                "scores": asdict(scores),
                "ms_per_series": ms,
            }
            for label, (scores, ms) in results.items()
        ],
        "shapes": shapes,
    }
    print(docs_results.detection_full(details))
    print(docs_results.detection_shapes(details))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2) + "\n")


if __name__ == "__main__":
    main()
