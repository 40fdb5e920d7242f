"""Algorithm and bus bandwidth of a collective, as nccl-tests reports them
(``doc/PERFORMANCE.md`` of NVIDIA/nccl-tests).

``algbw = S / t``; ``busbw = algbw * factor(n)``, the factor making the figure comparable
with the hardware's per-GPU link bandwidth whatever the number of ranks ``n``. ``S`` is the
size nccl-tests counts: the whole buffer of an all-reduce, the total gathered (all-gather)
or scattered (reduce-scatter) array, i.e. ``n`` times one rank's chunk, and one rank's send
buffer of an all-to-all. Pure arithmetic; the peaks are per-GPU unidirectional datasheet
figures, the ones nccl-tests' bus bandwidth is read against.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kernelwatch.harness.records import Bandwidth

#: nccl-tests' bus-bandwidth factor of each collective, for ``n`` ranks.
BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}
#: The collectives a distributed spec may name: those whose bus bandwidth nccl-tests
#: defines. Declared here, not in ``spec.py``, so that the arithmetic loads no torch (the
#: store's writers and the fleet generator use it).
COLLECTIVES = tuple(BUS_FACTORS)

#: Unidirectional per-GPU bandwidth (GB/s) of an interconnect, by GPU model: NVLink 4 on
#: H100/H200 (900 GB/s both ways), NVLink 5 on B200 (1.8 TB/s), PCIe 5.0 x16.
_PEAKS: tuple[tuple[str, re.Pattern[str], float], ...] = (
    ("nvlink", re.compile(r"\bB200\b"), 900.0),
    ("nvlink", re.compile(r"\bH(100|200)\b"), 450.0),
    ("pcie", re.compile(r"\b[HB][12]00\b"), 64.0),
)


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' factor for ``collective`` on ``ranks`` ranks; ValueError when unknown."""
    if collective not in BUS_FACTORS:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(BUS_FACTORS)}")
    if ranks < 1:
        raise ValueError(f"a collective needs at least one rank, not {ranks}")
    return BUS_FACTORS[collective](ranks)


def bandwidth(
    collective: str, message_bytes: int, ranks: int, time_ns: float, peak_gbps: float | None
) -> Bandwidth:
    """Algorithm and bus bandwidth (GB/s) of moving ``message_bytes`` in ``time_ns``."""
    factor = bus_factor(collective, ranks)
    algbw = message_bytes / time_ns  # bytes per ns = GB/s
    return Bandwidth(collective, message_bytes, factor, algbw, algbw * factor, peak_gbps)


def interconnect_peak(interconnect: str, device: str) -> float | None:
    """The datasheet peak of ``interconnect`` (``nvlink``, ``pcie``; None for ``loopback``
    and unknown GPUs) between GPUs named ``device``. Across nodes the network bounds it and
    its speed is not known here: None."""
    if "+" in interconnect:
        return None
    for kind, model, gbps in _PEAKS:
        if kind == interconnect and model.search(device):
            return gbps
    return None
