"""How the change-point detector does on short histories: the settings the demo and the flow
tests use, against alternatives (docs/FLOWS.md quotes the output).

Each trial is one regressed series (a step of STEP x after ``before`` points, ``after`` points
long) and two unchanged series of the same length, with Gaussian noise of ``--noise`` on each
nightly median. Detection runs the way the nightly runs it: a pass after every night from
the first night it can fire. A miss is a regressed series never reported at the step; a false
alarm is an unchanged series reported at any pass.

    python scripts/eval_short_history.py --trials 300
"""

from __future__ import annotations

import argparse

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


def passes(series: np.ndarray, config: DetectorConfig) -> list[tuple[int, ...]]:
    """The change-point indices each nightly pass reports."""
    return [
        tuple(c.index for c in detect(series[:n], config).change_points)
        for n in range(2 * config.min_size, series.size + 1)
    ]


def main() -> None:
    """Print, per setting, the miss rate and the false-alarm rate per unchanged series."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--noise", type=float, default=0.03)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    print(
        f"| alpha | min_size | nights before/after | miss | false alarms ({args.noise:.0%} noise) |"
    )
    print("|---|---|---|---|---|")
    for alpha, min_size, before, after in SETTINGS:
        config = DetectorConfig(alpha=alpha, min_size=min_size)
        missed = alarms = 0
        for _ in range(args.trials):
            noise = 1 + args.noise * rng.standard_normal(before + after)
            regressed = np.r_[np.full(before, 1.0), np.full(after, STEP)] * noise
            missed += not any(before in found for found in passes(regressed, config))
            for _ in range(2):
                flat = 1 + args.noise * rng.standard_normal(before + after)
                alarms += any(passes(flat, config))
        print(
            f"| {alpha:g} | {min_size} | {before}/{after} | {missed / args.trials:.1%} | "
            f"{alarms / (2 * args.trials):.1%} |"
        )


if __name__ == "__main__":
    main()
