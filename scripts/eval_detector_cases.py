"""The detector's figures in docs/DETECTION.md's "Thresholds and false alarms", measured on
the cases the tests check (tests/test_changepoints.py), at the defaults:

- false alarms: the share of 1,000 unchanged 200-point series (full noise model) with any
  change, per seed (2024 is the test's);
- 3 % steps: of 100 series (``with_step`` of tests/synthetic_series.py, seeds 0-99, up and
  down alternately), how many have the step found within +-2 points and nothing else, per jitter.

    .venv/bin/python scripts/eval_detector_cases.py --json docs/results/detector_cases.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import docs_results
import numpy as np

from kernelwatch.analysis.changepoints import detect

# The synthetic generators are test data: they live in tests/, outside the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from synthetic_series import make_series, with_step

ALARM_SEEDS = (2024, 2, 3)
ALARM_SERIES = 1000
STEP_JITTERS = (0.005, 0.01, 0.02)
STEP_SERIES = 100


def false_alarms(seed: int) -> float:
    """The share of unchanged 200-point series with any change point."""
    rng = np.random.default_rng(seed)
    series = (make_series(rng, 200, 0).y for _ in range(ALARM_SERIES))
    return sum(bool(detect(y).change_points) for y in series) / ALARM_SERIES


def steps_found(jitter: float) -> int:
    """Of STEP_SERIES 3 % steps, those found within +-2 points with nothing else found."""
    found = 0
    for seed in range(STEP_SERIES):
        y, at = with_step(seed, jitter=jitter, step=0.03 if seed % 2 else -0.03)
        points = detect(y).change_points
        found += len(points) == 1 and abs(points[0].index - at) <= 2
    return found


def main() -> None:
    """Measure, print, write the results JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    details = {
        "alarm_series": ALARM_SERIES,
        "false_alarms": {str(seed): false_alarms(seed) for seed in ALARM_SEEDS},
        "step_series": STEP_SERIES,
        "steps_found": {f"{j:g}": steps_found(j) for j in STEP_JITTERS},
    }
    print(docs_results.detector_cases(details))
    if args.json:
        args.json.write_text(json.dumps(details, indent=2) + "\n")


if __name__ == "__main__":
    main()
