"""Change points on a series of measurement records (one per commit, in commit order), each
confirmed on the raw samples of the runs either side of it.

The detector sees one point per run (the median of the samples that count); a change it
finds is kept only if the pooled raw samples of the runs before and after it agree (rank
test plus effect floors), and is labelled ``code`` or ``environment`` by the same test in
cycle space when every run recorded clocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from kernelwatch.analysis.changepoints import ChangePoint, Detection, detect, neighbour_bounds
from kernelwatch.analysis.shift_test import Floors, SampledRun, confirm_on_samples, counted_samples
from kernelwatch.analysis.thresholds import DetectorConfig

_DEFAULT = DetectorConfig()


def detect_measurements(runs: Sequence[SampledRun], config: DetectorConfig = _DEFAULT) -> Detection:
    """Change points of a series of measurements; indices point into ``runs``.

    Runs that are not ``ok`` or kept no sample are skipped (they carry no time); a change
    that the raw samples do not confirm is dropped.
    """
    usable = [i for i, m in enumerate(runs) if m.status == "ok" and counted_samples(m)[0].size]
    samples = [counted_samples(runs[i]) for i in usable]
    y = [float(np.median(ns)) for ns, _ in samples]
    # No clocks for the medians: each change's cause comes from its runs' own samples below.
    found = detect(y, config)
    floors = Floors(
        alpha=config.alpha,
        magnitude=max(config.min_magnitude, config.noise_factor * found.noise_pct / 100.0),
        effect=config.min_effect,
    )
    points = [cp.index for cp in found.change_points]
    kept: list[ChangePoint] = []
    for cp in found.change_points:
        lo, hi = neighbour_bounds(len(y), cp.index, points, config.window)
        # A drift's levels are the ones before its ramp and after it, not either side of
        # the night it began (the ramp itself is neither).
        until, since = (cp.index, cp.index) if cp.drift is None else (cp.index, cp.drift.end)
        hi = max(hi, min(len(y), since + config.min_size))
        before = [runs[i] for i in usable[lo:until]]
        after = [runs[i] for i in usable[since:hi]]
        in_time, in_cycles = confirm_on_samples(before, after, floors)
        if not in_time.confirmed:
            continue
        cause = (
            cp.cause if in_cycles is None else ("code" if in_cycles.confirmed else "environment")
        )
        drift = (
            None
            if cp.drift is None
            else replace(cp.drift, start=usable[cp.drift.start], end=usable[cp.drift.end])
        )
        kept.append(replace(cp, index=usable[cp.index], cause=cause, drift=drift))
    return replace(found, n=len(runs), change_points=tuple(kept))
