"""Static metrics of a compiled kernel, parsed from the text NVIDIA's tools print.

Pure functions over three texts: ``ptxas -v`` (spills; nvcc's ``--resource-usage`` prints
the same lines), ``cuobjdump --dump-resource-usage`` (registers, stack, static shared
memory) and ``cuobjdump -sass`` (the instruction stream). Running the tools is
``nvtools.py``'s job; keeping the parsing apart lets it be tested on captured output.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

#: Tensor-core classes from the oldest to the newest path; a move left is a downgrade.
#: ``HMMA`` is the warp-level ``mma.sync`` family (Ampere and later, also IMMA),
#: ``HGMMA`` Hopper's warpgroup ``wgmma`` on 16-bit and tf32 operands (IGMMA counts as
#: HGMMA), ``QGMMA`` the same on fp8 operands; ``tcgen05`` Blackwell's ``UTC*MMA`` issued
#: from tensor memory, ``UTCQMMA`` its fp8 (``kind::f8f6f4``) form, ``UTCOMMA`` its
#: block-scaled FP4 form (``kind::mxf4``/``mxf4nvf4``: e2m1 operands with e8m0 or e4m3 scales,
#: what ``tl.dot_scaled`` on e2m1 compiles to for sm_100a). Each fp8 class ranks
#: above its generation's 16-bit one, so an FP8 GEMM whose operands get widened before the
#: MMA (QGMMA -> HGMMA on sm_90a, UTCQMMA -> tcgen05 on sm_100a: half the throughput) is a
#: downgrade; the FP4 class ranks above fp8, so an FP4 GEMM that falls back to an fp8 or 16-bit
#: MMA is one too. Hopper has no FP4 MMA: there ``tl.dot_scaled`` upcasts its operands to
#: HGMMA, an emulation. Builds are only compared on the same target, so the order across
#: generations only has to agree within each.
TENSOR_CORE_RANK: dict[str, int] = {
    "none": 0,
    "HMMA": 1,
    "HGMMA": 2,
    "QGMMA": 3,
    "tcgen05": 4,
    "UTCQMMA": 5,
    "UTCOMMA": 6,
}
#: The classes whose operands are fp8, and block-scaled FP4.
FP8_TENSOR_CORES = frozenset({"QGMMA", "UTCQMMA"})
FP4_TENSOR_CORES = frozenset({"UTCOMMA"})

#: The dtypes whose operands are block-scaled FP4 (``harness/spec.py``'s ``DTYPES`` has them).
FP4_DTYPES = frozenset({"mxfp4"})


def emulation(dtype: str, tensor_core: str | None) -> str | None:
    """What a build of an FP4 case that runs no FP4 MMA is, in a few words (None: anything
    else): on sm_90a always, since Hopper has no FP4 tensor cores and ``tl.dot_scaled`` runs
    wgmma on operands upcast to bf16; on sm_100a a fall-back, which ``static_diff`` flags."""
    if dtype not in FP4_DTYPES or tensor_core in FP4_TENSOR_CORES:
        return None
    return f"emulated: no FP4 tensor-core MMA ({tensor_core or 'none'} on upcast operands)"


_PTXAS_ENTRY = re.compile(
    r"^ptxas\S* info\s*: (?:Compiling entry function|Function properties for) '?([\w$.]+)'?"
)
_PTXAS_SPILLS = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_RESOURCE_FUNCTION = re.compile(r"^\s*Function ([\w$.]+):")
_RESOURCE_FIELD = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_SASS_FUNCTION = re.compile(r"^\s*Function : ([\w$.]+)")
#: What ends a function's code in a SASS dump: the next target's or file's header.
_SASS_CODE_END = re.compile(r"^\s*(?:code for sm_|Fatbin |\.target\b)")
_SASS_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Za-z0-9_.]*)")


@dataclass(frozen=True)
class Spills:
    """One function's line from ``ptxas -v``."""

    stack_bytes: int
    store_bytes: int
    load_bytes: int


@dataclass(frozen=True)
class Resources:
    """One function's line from ``cuobjdump --dump-resource-usage`` (SHARED is static only)."""

    registers: int
    stack_bytes: int
    shared_static_bytes: int
    local_bytes: int


@dataclass(frozen=True)
class InstructionMix:
    """What follows from a function's SASS opcode histogram."""

    opcodes: Mapping[str, int]
    instructions: int
    tensor_core: str
    tma_loads: int
    global_load_bits: int | None
    local_loads: int
    local_stores: int


def parse_ptxas_log(text: str) -> dict[str, Spills]:
    """Spill and stack bytes per function from ``ptxas -v`` output (any ptxas flavour)."""
    spills: dict[str, Spills] = {}
    current: str | None = None
    for line in text.splitlines():
        entry = _PTXAS_ENTRY.match(line)
        if entry:
            current = entry.group(1)
            continue
        found = _PTXAS_SPILLS.search(line)
        if found and current is not None:
            stack, store, load = (int(g) for g in found.groups())
            spills[current] = Spills(stack, store, load)
    return spills


def parse_resource_usage(text: str) -> dict[str, Resources]:
    """Registers, stack, static shared and local bytes per function."""
    usage: dict[str, Resources] = {}
    current: str | None = None
    for line in text.splitlines():
        header = _RESOURCE_FUNCTION.match(line)
        if header:
            current = header.group(1)
            continue
        if current is None:
            continue
        values = dict(_RESOURCE_FIELD.findall(line))
        if "REG" in values:
            usage[current] = Resources(
                registers=int(values["REG"]),
                stack_bytes=int(values.get("STACK", 0)),
                shared_static_bytes=int(values.get("SHARED", 0)),
                local_bytes=int(values.get("LOCAL", 0)),
            )
            current = None
    return usage


def parse_sass(text: str) -> dict[str, Counter[str]]:
    """The opcode histogram (full mnemonic with modifiers) per function of a SASS dump."""
    functions: dict[str, Counter[str]] = {}
    current: Counter[str] | None = None
    for line in text.splitlines():
        header = _SASS_FUNCTION.match(line)
        if header:
            current = functions.setdefault(header.group(1), Counter())
            continue
        instruction = _SASS_INSTRUCTION.match(line)
        if instruction and current is not None:
            current[instruction.group(1)] += 1
    return functions


def code_hashes(text: str) -> dict[str, str]:
    """The SHA-256 of each function's instruction stream (its lines of a SASS dump: addresses,
    instructions and their encodings). Unlike the cubin's hash it ignores the debug line
    table, so a comment or a blank line added above the code is the same code."""
    lines: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        header = _SASS_FUNCTION.match(line)
        if header:
            current = lines.setdefault(header.group(1), [])
        elif _SASS_CODE_END.match(line):
            current = None
        elif current is not None and line.strip():
            current.append(line.strip())
    return {
        name: hashlib.sha256("\n".join(code).encode()).hexdigest() for name, code in lines.items()
    }


def instruction_mix(opcodes: Mapping[str, int]) -> InstructionMix:
    """Derive the tensor-core class, TMA loads, load width and local traffic from opcodes.

    NOPs are padding after the last instruction, so they are left out of the count.
    """
    return InstructionMix(
        opcodes=dict(sorted(opcodes.items())),
        instructions=sum(n for op, n in opcodes.items() if _base(op) != "NOP"),
        tensor_core=tensor_core_class(opcodes),
        tma_loads=sum(n for op, n in opcodes.items() if op.startswith("UTMALDG")),
        global_load_bits=global_load_bits(opcodes),
        local_loads=sum(n for op, n in opcodes.items() if _base(op) == "LDL"),
        local_stores=sum(n for op, n in opcodes.items() if _base(op) == "STL"),
    )


def tensor_core_class(opcodes: Mapping[str, int]) -> str:
    """The newest tensor-core path the code uses (see :data:`TENSOR_CORE_RANK`)."""
    bases = {_base(op) for op, n in opcodes.items() if n}
    if "UTCOMMA" in bases:
        return "UTCOMMA"
    if "UTCQMMA" in bases:
        return "UTCQMMA"
    if any(b.startswith("UTC") and b.endswith("MMA") for b in bases):
        return "tcgen05"
    if "QGMMA" in bases:
        return "QGMMA"
    if bases & {"HGMMA", "IGMMA"}:
        return "HGMMA"
    if bases & {"HMMA", "IMMA"}:
        return "HMMA"
    return "none"


def global_load_bits(opcodes: Mapping[str, int]) -> int | None:
    """The widest global load, in bits: ``LDG`` and ``LDGSTS`` (``cp.async``), or None."""
    widths = [_load_width(op) for op, n in opcodes.items() if n and _base(op) in ("LDG", "LDGSTS")]
    return max(widths) if widths else None


def _load_width(opcode: str) -> int:
    modifiers = opcode.split(".")[1:]
    for bits in ("128", "64"):
        if bits in modifiers:
            return int(bits)
    if any(m in ("U16", "S16") for m in modifiers):
        return 16
    if any(m in ("U8", "S8") for m in modifiers):
        return 8
    return 32


def _base(opcode: str) -> str:
    return opcode.split(".", 1)[0]
