"""The world a distributed case ran on: every rank's device, the links between the GPUs
(``nvidia-smi topo -m``), the NCCL version and the ``NCCL_*`` environment.

The parsing and classification are pure and tested on the CPU; the two readings of the
machine (``nvidia-smi`` and ``torch.cuda``) are isolated in :func:`local_links` and
:func:`rank_info`.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence

from kernelwatch.harness.records import RankInfo, WorldInfo
from kernelwatch.harness.spec import World

#: ``NCCL_*`` variables that change what NCCL logs, not how fast it moves data.
NCCL_DEBUG_ONLY = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})

#: ``nvidia-smi topo -m`` link types from the best path to the worst (``NV<n>``: n bonded
#: NVLinks, ranked by n, above them all).
_PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NVLINK = re.compile(r"^NV(\d+)$")


def nccl_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``NCCL_*`` variables that can change a collective's speed (algorithm, protocol,
    channels, transports), without the logging switches."""
    return {
        k: v
        for k, v in sorted(environ.items())
        if k.startswith("NCCL_") and k not in NCCL_DEBUG_ONLY
    }


def _rank_of_link(link: str) -> tuple[int, int]:
    """Sort key, lower is worse: PCIe paths by distance, then NVLink by link count."""
    match = _NVLINK.match(link)
    if match:
        return (1, int(match.group(1)))
    return (0, -_PCIE_PATHS.index(link)) if link in _PCIE_PATHS else (0, -len(_PCIE_PATHS))


def parse_topology(text: str, gpus: Sequence[int]) -> str:
    """The worst link ``nvidia-smi topo -m`` shows between any two of ``gpus`` (``NV18``,
    ``PIX``, ``SYS``), or "" when fewer than two GPUs or the matrix lacks them."""
    header: list[str] = []
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = line.split()
        if not cells:
            continue
        if line[:1].isspace() and "GPU0" in cells:  # the header row is indented
            header = [c for c in cells if re.fullmatch(r"GPU\d+", c)]
        elif re.fullmatch(r"GPU\d+", cells[0]) and header:
            rows[cells[0]] = cells[1 : 1 + len(header)]
    links = []
    for i in gpus:
        for j in gpus:
            row = rows.get(f"GPU{i}")
            if i < j and row is not None and f"GPU{j}" in header:
                links.append(row[header.index(f"GPU{j}")])
    return min(links, key=_rank_of_link) if links else ""


def interconnect(backend: str, links: str, world: World) -> str:
    """``nvlink``, ``pcie``, ``loopback`` (gloo between processes of one host) or ``local``
    (one GPU), with ``+network`` when the ranks span nodes."""
    if backend != "nccl":
        within = "loopback"
    elif not links:
        within = "local"
    else:
        within = "nvlink" if _NVLINK.match(links) else "pcie"
    return within + ("+network" if world.nodes > 1 else "")


def local_links(gpus: Sequence[int]) -> str:
    """The worst link between this node's ``gpus``, read from ``nvidia-smi topo -m``; ""
    when there is no nvidia-smi or it fails."""
    if len(gpus) < 2 or shutil.which("nvidia-smi") is None:
        return ""
    try:
        out = subprocess.run(
            ["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return parse_topology(out, gpus)


def rank_info(rank: int, device: str) -> RankInfo:
    """This rank's host and device (``cuda:N`` or ``cpu``), with the GPU's UUID."""
    import torch

    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        uuid = str(getattr(props, "uuid", "")) or None
        return RankInfo(rank, socket.gethostname(), props.name, uuid)
    return RankInfo(rank, socket.gethostname(), "cpu")


def nccl_version() -> str | None:
    """The NCCL torch runs with, as ``2.21.5``; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def world_info(
    backend: str,
    world: World,
    ranks: Sequence[RankInfo],
    links: str,
    environ: Mapping[str, str],
) -> WorldInfo:
    """The record of the world, from what every rank reported about itself."""
    return WorldInfo(
        backend=backend,
        world_size=world.size,
        nodes=world.nodes,
        interconnect=interconnect(backend, links, world),
        ranks=tuple(sorted(ranks, key=lambda r: r.rank)),
        links=links,
        nccl_version=nccl_version() if backend == "nccl" else None,
        nccl_env=nccl_env(environ) if backend == "nccl" else {},
    )
