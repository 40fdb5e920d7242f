"""Runs one anchor change-point detector inside that anchor's own virtual environment.

Started by scripts/eval_detection.py as ``VENV/bin/python detection_anchor_worker.py NAME``
(NAME: otava, mongo or ruptures). Reads one JSON request per line on stdin,
``{"params": {...}, "series": [[float, ...], ...]}``, and answers one JSON line per request,
``{"detections": [[index, ...], ...], "seconds": float}``: for each series the indices of
the first points of new regimes, and the time spent inside the anchor's own calls. Uses the
standard library plus the anchor, nothing from kernelwatch (whose numpy may differ).
"""

from __future__ import annotations

import json
import sys
import time
import zlib
from collections.abc import Callable
from typing import Any

Detector = Callable[[list[float], dict[str, Any]], list[int]]


def _otava() -> Detector:
    from otava.analysis import compute_change_points

    def run(y: list[float], params: dict[str, Any]) -> list[int]:
        # Otava wants a Python list: with a numpy array it raises ValueError on most series.
        points, _ = compute_change_points(list(y), **params)
        return [int(cp.index) for cp in points]

    return run


def _mongo() -> Detector:
    import numpy as np
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    def run(y: list[float], params: dict[str, Any]) -> list[int]:
        # Its permutation test draws from numpy's global generator: seeded from the series
        # itself, a row can be reproduced whatever the chunking and the order of the calls.
        np.random.seed(zlib.crc32(json.dumps(y).encode()))
        return sorted(int(i) for i in e_divisive(y, **params))

    return run


def _ruptures() -> Detector:
    import numpy as np
    import ruptures

    def run(y: list[float], params: dict[str, Any]) -> list[int]:
        params = dict(params)
        signal = np.asarray(y, dtype=float)
        if params.pop("log_standardize", False):
            # The tuned setting may see log times scaled by a robust noise estimate, so one
            # penalty fits every series (l1/l2 costs are not scale-free).
            signal = np.log(signal)
            diffs = np.diff(signal)
            sigma = 1.4826 * np.median(np.abs(diffs - np.median(diffs))) / np.sqrt(2.0)
            signal = (signal - np.median(signal)) / max(sigma, 1e-12)
        pen = params.pop("pen")
        algo = ruptures.Pelt(**params).fit(signal)
        # predict() returns the end of every segment, the last one being len(y).
        return [int(b) for b in algo.predict(pen=pen)[:-1]]

    return run


_ANCHORS: dict[str, Callable[[], Detector]] = {
    "otava": _otava,
    "mongo": _mongo,
    "ruptures": _ruptures,
}


def main() -> None:
    """Serve requests until stdin closes."""
    detector = _ANCHORS[sys.argv[1]]()
    for line in sys.stdin:
        request = json.loads(line)
        detections = []
        seconds = 0.0
        for y in request["series"]:
            start = time.perf_counter()
            found = detector(y, request["params"])
            seconds += time.perf_counter() - start
            detections.append(found)
        sys.stdout.write(json.dumps({"detections": detections, "seconds": seconds}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
