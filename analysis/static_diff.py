"""Static regressions between two builds of a suite: pure functions over build records.

Builds are matched by (kernel, function, dtype, config, case, arch), or across a config
change (``diff_builds``). For each pair the rules
are: new or more spill bytes; a tensor-core class downgrade (``TENSOR_CORE_RANK``); registers
crossing an occupancy boundary for the block size (fewer resident blocks per SM); shared
memory newly over the target's per-block limit; a build that no longer compiles; the
instruction count up by more than ``StaticThresholds.max_instruction_growth`` (per kernel,
``analysis/thresholds.py``); and global loads narrowed (lost vectorisation). Each
:class:`Finding` names the build and says before -> after.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any

from kernelwatch.analysis.thresholds import StaticThresholds, Thresholds
from kernelwatch.harness.build.archs import ARCHS, Arch
from kernelwatch.harness.build.sass import FP4_TENSOR_CORES, FP8_TENSOR_CORES, TENSOR_CORE_RANK
from kernelwatch.harness.records import BuildMetrics

_THRESHOLDS = Thresholds()
_STATIC = StaticThresholds()

RULES = (
    "no_longer_compiles",
    "spills",
    "tensor_core",
    "occupancy",
    "shared_memory",
    "instructions",
    "load_width",
)

BuildKey = tuple[str, str, str, str, str, str, int]


@dataclass(frozen=True)
class Finding:
    """One static regression of one build."""

    rule: str
    kernel: str
    function: str
    dtype: str
    config: str
    case: str
    arch: str
    before: str
    after: str
    message: str

    def to_json(self) -> dict[str, Any]:
        return {"kind": "static_regression", **asdict(self)}


def build_key(record: BuildMetrics) -> BuildKey:
    """What identifies one build across two commits: the launch's position in its case
    too, so two launches of one function (fused MoE's two grouped GEMMs) are two builds,
    each compared with its own counterpart."""
    config = record.config.label() if record.config is not None else ""
    return (record.kernel, record.function, record.dtype, config, record.case, record.arch,
            record.launch_index)  # fmt: skip


def resident_blocks(registers: int, num_warps: int, arch: Arch) -> int:
    """Blocks of ``num_warps`` warps an SM holds, limited by registers, warps and blocks.

    Registers are granted per warp in units of ``arch.register_unit`` (a thread's count
    rounded up to 8), which is what makes some register counts cliffs.
    """
    per_warp = -(-registers * 32 // arch.register_unit) * arch.register_unit
    by_registers = arch.registers_per_sm // max(1, per_warp * num_warps)
    return min(by_registers, arch.max_warps_per_sm // max(1, num_warps), arch.max_blocks_per_sm)


def diff_builds(
    base: Iterable[BuildMetrics],
    head: Iterable[BuildMetrics],
    thresholds: Thresholds = _THRESHOLDS,
) -> list[Finding]:
    """Every static regression from ``base`` to ``head``, in ``head``'s order, each build
    judged by its kernel's thresholds.

    Builds pair by :func:`build_key`. A build whose config changed (a new block size or
    warp count) pairs with the base's build of the same kernel, function, dtype, case and
    target when that is the only unpaired one on each side, so a config change is judged
    like any other change. A build only in ``base`` counts as no longer compiling when
    ``head`` could not even record that kernel's launches for the same dtype and target (an
    error record without a function), with that error's reason; otherwise it was removed
    or renamed, which is not a regression. Builds only in ``head`` are new: nothing to
    compare.
    """
    head = list(head)
    pairs = _pairs(list(base), head)
    findings: list[Finding] = []
    for after in head:
        before = pairs.get(id(after))
        if before is not None:
            rules = thresholds.for_kernel(after.kernel).static
            findings += [
                _which_launch(_config_change(f, before, after), after)
                for f in compare(before, after, rules)
            ]
    paired = {id(before) for before in pairs.values()}
    unrecorded = {
        (r.kernel, r.dtype, r.arch): r for r in head if r.status != "ok" and not r.function
    }
    for before in base:
        lost = unrecorded.get((before.kernel, before.dtype, before.arch))
        if id(before) not in paired and before.status == "ok" and lost is not None:
            findings.append(_finding("no_longer_compiles", before, "ok", "error", lost.reason))
    return findings


def paired_builds(
    base: Iterable[BuildMetrics], head: Iterable[BuildMetrics]
) -> list[tuple[BuildMetrics, BuildMetrics]]:
    """Each build of ``head`` that :func:`diff_builds` compares, with its base build, in
    ``head``'s order."""
    head = list(head)
    pairs = _pairs(list(base), head)
    return [(pairs[id(after)], after) for after in head if id(after) in pairs]


def _pairs(base: list[BuildMetrics], head: list[BuildMetrics]) -> dict[int, BuildMetrics]:
    """Each head build (by ``id``) and the base build it is compared with."""
    base_by_key = {build_key(r): r for r in base}
    pairs = {id(r): base_by_key[build_key(r)] for r in head if build_key(r) in base_by_key}
    taken = {id(r) for r in pairs.values()}
    lone_base: dict[tuple[str, ...], list[BuildMetrics]] = {}
    lone_head: dict[tuple[str, ...], list[BuildMetrics]] = {}
    for records, lone, done in ((base, lone_base, taken), (head, lone_head, set(pairs))):
        for r in records:
            if id(r) not in done and r.function:
                lone.setdefault(_site(r), []).append(r)
    for site, [after] in ((s, rs) for s, rs in lone_head.items() if len(rs) == 1):
        if len(lone_base.get(site, ())) == 1:
            pairs[id(after)] = lone_base[site][0]
    return pairs


def _site(record: BuildMetrics) -> tuple[str, ...]:
    """A build's identity without its config."""
    return (record.kernel, record.function, record.dtype, record.case, record.arch,
            str(record.launch_index))  # fmt: skip


def _which_launch(finding: Finding, after: BuildMetrics) -> Finding:
    """A finding of a case's second or later launch says which: its function is also the
    first's (fused MoE's two grouped GEMMs)."""
    if not after.launch_index:
        return finding
    return replace(finding, message=f"{finding.message} (launch {after.launch_index + 1})")


def _config_change(finding: Finding, before: BuildMetrics, after: BuildMetrics) -> Finding:
    old, new = build_key(before)[3], build_key(after)[3]
    if old == new:
        return finding
    return replace(finding, message=f"{finding.message} (config {old} -> {new})")


def compare(
    before: BuildMetrics, after: BuildMetrics, rules: StaticThresholds = _STATIC
) -> list[Finding]:
    """The static regressions of one build from ``before`` to ``after``."""
    if before.status != "ok":
        return []
    if after.status != "ok":
        return [_finding("no_longer_compiles", after, "ok", "error", after.reason)]
    checks = (_spills, _tensor_core, _occupancy, _shared_memory, _load_width)
    findings = [f for check in checks if (f := check(before, after)) is not None]
    grown = _instructions(before, after, rules.max_instruction_growth)
    return findings + ([grown] if grown is not None else [])


def _spills(before: BuildMetrics, after: BuildMetrics) -> Finding | None:
    old = (before.spill_store_bytes or 0, before.spill_load_bytes or 0)
    new = (after.spill_store_bytes or 0, after.spill_load_bytes or 0)
    if sum(new) <= sum(old):
        return None
    text = "{} B stores / {} B loads"
    what = "starts spilling" if sum(old) == 0 else "spills more"
    return _finding(
        "spills",
        after,
        text.format(*old),
        text.format(*new),
        f"{what} (registers {before.registers} -> {after.registers})",
    )


def _tensor_core(before: BuildMetrics, after: BuildMetrics) -> Finding | None:
    old, new = before.tensor_core or "none", after.tensor_core or "none"
    if TENSOR_CORE_RANK.get(new, 0) >= TENSOR_CORE_RANK.get(old, 0):
        return None
    lost = (
        "FP4 tensor-core path"
        if old in FP4_TENSOR_CORES
        else "FP8 tensor-core path"
        if old in FP8_TENSOR_CORES
        else "tensor-core path"
    )
    return _finding("tensor_core", after, old, new, f"lost its {lost}")


def _occupancy(before: BuildMetrics, after: BuildMetrics) -> Finding | None:
    arch = ARCHS.get(after.arch)
    if arch is None or None in (before.registers, after.registers, after.num_warps):
        return None
    warps = after.num_warps or 1
    old = resident_blocks(before.registers or 0, before.num_warps or warps, arch)
    new = resident_blocks(after.registers or 0, warps, arch)
    if new >= old:
        return None
    return _finding(
        "occupancy",
        after,
        f"{before.registers} regs",
        f"{after.registers} regs",
        f"resident blocks per SM {old} -> {new} at {warps} warps a block",
    )


def _shared_memory(before: BuildMetrics, after: BuildMetrics) -> Finding | None:
    arch = ARCHS.get(after.arch)
    if arch is None:
        return None
    old, new = _shared(before), _shared(after)
    if new <= arch.shared_limit_bytes or old > arch.shared_limit_bytes:
        return None
    return _finding(
        "shared_memory",
        after,
        f"{old} B",
        f"{new} B",
        f"over {arch.name}'s {arch.shared_limit_bytes} B a block: it cannot launch",
    )


def _instructions(before: BuildMetrics, after: BuildMetrics, max_growth: float) -> Finding | None:
    old, new = before.instructions or 0, after.instructions or 0
    if old == 0 or new <= old * (1 + max_growth):
        return None
    growth = new / old - 1
    return _finding(
        "instructions",
        after,
        str(old),
        str(new),
        f"+{growth:.0%} instructions (threshold {max_growth:.0%})",
    )


def _load_width(before: BuildMetrics, after: BuildMetrics) -> Finding | None:
    old, new = before.global_load_bits, after.global_load_bits
    if old is None or new is None or new >= old:
        return None
    return _finding("load_width", after, f"{old}-bit", f"{new}-bit", "widest global load narrowed")


def _shared(record: BuildMetrics) -> int:
    return (record.shared_static_bytes or 0) + (record.shared_dynamic_bytes or 0)


def _finding(rule: str, record: BuildMetrics, before: str, after: str, message: str) -> Finding:
    kernel, function, dtype, config, case, arch, _ = build_key(record)
    return Finding(rule, kernel, function, dtype, config, case, arch, before, after, message)
