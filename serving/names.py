"""A profiler trace's kernels matched to kernelwatch's kernels by name.

A trace names a kernel as CUPTI demangled it; kernelwatch knows, for each kernel of a
repository, the functions its build stage compiled for the spec's launches (a Triton jit
function's name, a CUDA C++ entry point, mangled or ``extern "C"``) and the stock library
it is measured against (its baseline, e.g. ``torch.matmul (cuBLAS)``). A trace kernel is

- the kernel whose function has its base name (``short_name``), role ``kernel``; or
- a library's kernel (cuBLAS, cuBLASLt/nvjet, CUTLASS, FlashAttention, NCCL, by the name
  patterns those libraries' kernels have) matched to the kernel whose baseline is that
  library, role ``baseline``: what a deployment runs where kernelwatch's kernel is not
  deployed; or
- unmatched, listed with its share, never dropped.

Pure: the store supplies the known kernels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from kernelwatch.serving.traces import KernelTime, short_name

Role = Literal["kernel", "baseline", ""]

#: Library -> the patterns its kernels' names have (docs/SERVING.md lists examples); the
#: library's name is what a baseline's name mentions.
LIBRARIES: Mapping[str, tuple[re.Pattern[str], ...]] = {
    "cuBLAS": (
        re.compile(r"^sm\d+_xmma_"),
        re.compile(r"^nvjet_"),
        re.compile(r"cublas", re.I),
        re.compile(r"^(ampere|hopper|blackwell)_.*gemm"),
    ),
    "FlashAttention": (re.compile(r"^flash_"), re.compile(r"flash::")),
    "NCCL": (re.compile(r"^ncclDevKernel_"), re.compile(r"^ncclKernel_")),
    "CUTLASS": (re.compile(r"^cutlass::"), re.compile(r"cutlass_.*(gemm|conv)")),
}


@dataclass(frozen=True)
class KnownKernel:
    """A kernelwatch kernel of the repository: the functions its builds compiled and the
    name of the baseline it is measured against (empty: none)."""

    kernel: str
    functions: tuple[str, ...]
    baseline: str = ""


@dataclass(frozen=True)
class Match:
    """One trace kernel and what it is: ``kernel`` (None: unmatched), ``role``, and for a
    library kernel the ``library``."""

    trace: KernelTime
    kernel: str | None
    role: Role
    library: str = ""


def base_name(function: str) -> str:
    """The base name of a compiled function: a mangled C++ name's last identifier
    (``_ZN4vllm19silu_and_mul_kernelIfEEvPT_`` -> ``silu_and_mul_kernel``), else the
    demangled name's (see :func:`short_name`)."""
    if not function.startswith("_Z"):
        return short_name(function)
    rest, last = function[2:], ""
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    while rest[:1].isdigit():
        digits = re.match(r"\d+", rest)
        assert digits is not None
        length = int(digits.group())
        start = digits.end()
        last, rest = rest[start : start + length], rest[start + length :]
        if not nested:
            break
    return last or function


def library_of(name: str) -> str:
    """The library whose kernel ``name`` (a trace's full name) is; empty when none."""
    for library, patterns in LIBRARIES.items():
        base = short_name(name)
        if any(p.search(name) or p.search(base) for p in patterns):
            return library
    return ""


def match(kernels: Sequence[KernelTime], known: Sequence[KnownKernel]) -> list[Match]:
    """Each trace kernel matched (in the trace's order). Where two kernelwatch kernels
    claim one name, the first by name is taken: a suite should not have two."""
    by_function: dict[str, str] = {}
    by_library: dict[str, str] = {}
    for k in sorted(known, key=lambda k: k.kernel):
        for function in k.functions:
            by_function.setdefault(base_name(function), k.kernel)
        for library in LIBRARIES:
            if library.lower() in k.baseline.lower():
                by_library.setdefault(library, k.kernel)
    matched = []
    for t in kernels:
        if t.short_name in by_function:
            matched.append(Match(t, by_function[t.short_name], "kernel"))
            continue
        library = library_of(t.name)
        if library in by_library:
            matched.append(Match(t, by_library[library], "baseline", library))
        else:
            matched.append(Match(t, None, "", library))
    return matched
