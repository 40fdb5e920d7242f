"""The GPU architectures kernelwatch builds for, and the per-SM limits the static rules use.

Plain data, imported by the CLI, the build child and ``analysis/`` alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    """One compilation target and the limits of its SMs (CUDA C Programming Guide, table
    "Technical Specifications per Compute Capability")."""

    name: str
    capability: int
    #: Most shared memory one block may use (static + dynamic, after opting in).
    shared_limit_bytes: int
    registers_per_sm: int = 65536
    max_warps_per_sm: int = 64
    max_blocks_per_sm: int = 32
    #: Registers are granted per warp in units of this many (a thread's count rounded to 8).
    register_unit: int = 256


ARCHS: dict[str, Arch] = {
    "sm_80": Arch("sm_80", 80, 163 * 1024),
    "sm_90a": Arch("sm_90a", 90, 227 * 1024),
    "sm_100a": Arch("sm_100a", 100, 227 * 1024),
}
DEFAULT_ARCHS: tuple[str, ...] = ("sm_90a", "sm_100a")


def parse_archs(text: str) -> tuple[str, ...]:
    """``"sm_90a,sm_100a"`` -> names; raises ``ValueError`` naming the known ones."""
    names = tuple(dict.fromkeys(a.strip() for a in text.split(",") if a.strip()))
    unknown = [a for a in names if a not in ARCHS]
    if unknown or not names:
        raise ValueError(
            f"unknown arch {', '.join(map(repr, unknown)) or repr(text)}; known: {', '.join(ARCHS)}"
        )
    return names
