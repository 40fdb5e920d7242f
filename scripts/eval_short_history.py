"""How the change-point detector does on short histories: the fleet's defaults against looser
settings (docs/FLOWS.md renders the table from the results this writes).

Each trial is one regressed series (a step of STEP x after ``before`` points, ``after`` points
long) and two unchanged series of the same length, with Gaussian noise of ``--noise`` on each
nightly median. Detection runs the way the nightly runs it: a pass after every night from
the first night it can fire. A miss is a regressed series never reported at the step; a false
alarm is an unchanged series reported at any pass.

The latency part runs the fleet's defaults on a long history (LATENCY_BEFORE nights, then a
step of each of LATENCY_STEPS) at ``--latency-noise``: how many nights after it lands a pass
first reports the step. Nothing here is tuned: the settings are fixed in the script, so one
seed reports them.

    python scripts/eval_short_history.py --json docs/results/short_history.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import docs_results
import numpy as np

from kernelwatch.analysis.changepoints import DetectorConfig, detect

STEP = 3.3  # the demo's planted slowdown in the interpreter is about 3x
SETTINGS = (
    # alpha, min_size, nights before, nights after
    (1e-5, 6, 14, 12),
    (1e-3, 6, 12, 10),
    (1e-3, 6, 10, 8),
    (2e-3, 6, 10, 8),
    (1e-2, 4, 8, 6),
    (2e-2, 4, 8, 6),
)
LATENCY_BEFORE = 60
LATENCY_MAX = 30
LATENCY_STEPS = (3.3, 1.05)


def passes(series: np.ndarray, config: DetectorConfig, first: int = 0) -> list[tuple[int, ...]]:
    """The change-point indices each nightly pass reports, from the pass over ``first``
    points (at least two regimes' worth) to the one over the whole series."""
    return [
        tuple(c.index for c in detect(series[:n], config).change_points)
        for n in range(max(first, 2 * config.min_size), series.size + 1)
    ]


def short_histories(trials: int, noise: float, rng: np.random.Generator) -> list[dict]:
    """Per setting, the miss rate and the false-alarm rate per unchanged series."""
    rows = []
    for alpha, min_size, before, after in SETTINGS:
        config = DetectorConfig(alpha=alpha, min_size=min_size)
        missed = alarms = 0
        for _ in range(trials):
            scale = 1 + noise * rng.standard_normal(before + after)
            regressed = np.r_[np.full(before, 1.0), np.full(after, STEP)] * scale
            missed += not any(before in found for found in passes(regressed, config))
            for _ in range(2):
                flat = 1 + noise * rng.standard_normal(before + after)
                alarms += any(passes(flat, config))
        rows.append(
            {
                "alpha": alpha,
                "min_size": min_size,
                "before": before,
                "after": after,
                "miss": missed / trials,
                "false_alarms": alarms / (2 * trials),
            }
        )
    return rows


def latencies(trials: int, noise: float, rng: np.random.Generator) -> dict[str, list[int | None]]:
    """Per step, the nights after landing at which the defaults first report it (None: not
    within LATENCY_MAX nights)."""
    config = DetectorConfig()
    found: dict[str, list[int | None]] = {}
    for step in LATENCY_STEPS:
        nights: list[int | None] = []
        for _ in range(trials):
            level = np.r_[np.full(LATENCY_BEFORE, 1.0), np.full(LATENCY_MAX, step)]
            series = level * (1 + noise * rng.standard_normal(level.size))
            reports = passes(series, config, first=LATENCY_BEFORE + 1)
            nights.append(next((k + 1 for k, r in enumerate(reports) if LATENCY_BEFORE in r), None))
        found[f"{step:g}"] = nights
    return found


def main() -> None:
    """Measure, print the tables, write the results JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--latency-trials", type=int, default=100)
    parser.add_argument("--latency-noise", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    details = {
        "trials": args.trials,
        "noise": args.noise,
        "step": STEP,
        "seed": args.seed,
        "rows": short_histories(args.trials, args.noise, rng),
        "latency_trials": args.latency_trials,
        "latency_noise": args.latency_noise,
        "latency_before": LATENCY_BEFORE,
        "latency_max": LATENCY_MAX,
        "latency": latencies(args.latency_trials, args.latency_noise, rng),
    }
    print(docs_results.short_history(details))
    print()
    print(docs_results.short_history_latency(details))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2) + "\n")


if __name__ == "__main__":
    main()
