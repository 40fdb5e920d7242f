"""Reading profiler traces of a serving step into each GPU kernel's share of the step's GPU
time (issue 44's first half: which kernels a step spends its time in).

Two formats, told apart by their first bytes:

- torch.profiler's Chrome trace (Kineto; ``prof.export_chrome_trace``, often gzipped):
  ``traceEvents``, of which the complete events (``ph`` ``X``) with ``cat`` ``kernel`` are
  GPU kernels, ``dur`` in microseconds, the kernel's name as CUPTI demangled it.
- Nsight Systems' SQLite export (``nsys export --type sqlite``): the
  ``CUPTI_ACTIVITY_KIND_KERNEL`` table (``start``/``end`` in ns; ``demangledName`` and
  ``shortName`` ids into ``StringIds``).

A kernel is identified by its full name with what the two tools write differently made the
same (nsys writes a template argument ``(int)128`` where Kineto writes ``128``). The step's
GPU time is the sum of its kernels' times: copies, memsets and the CPU are outside it, so
a kernel's share says how much of the GPU's work it is, not of the wall time. Every problem
is one :class:`TraceError` line naming the file and what to do.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.harness.records import JsonRecord

TORCH_PROFILER, NSYS_SQLITE = "torch-profiler", "nsys-sqlite"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_GZIP_MAGIC = b"\x1f\x8b"
#: A C-style cast nsys puts before a template's integer argument: ``(int)128``.
_CAST = re.compile(r"\((?:unsigned |signed )?(?:int|long|long long|short|char|size_t)\)")
#: ... and a boolean one as ``(bool)1`` where Kineto writes ``true``.
_BOOL = {"(bool)0": "false", "(bool)1": "true"}
_SPACES = re.compile(r"\s+")


class TraceError(ValueError):
    """A file that cannot be read as a profiler trace of GPU kernels: one line."""


class NoKernelEvents(TraceError):
    """A well-formed trace with no GPU kernel in it: a CPU-only profile."""


@dataclass(frozen=True)
class KernelTime:
    """One kernel of a trace: its full name (as normalised), its base name, how often it
    ran, its total GPU time and its share of the trace's kernel time."""

    name: str
    short_name: str
    launches: int
    gpu_ns: int
    share: float


@dataclass(frozen=True)
class TraceProfile(JsonRecord, kind="serving_trace"):
    """The kernels of one profiler trace, most GPU time first. ``digest`` identifies the
    file's content; ``device`` is the GPU the trace names, if any."""

    digest: str
    source: str
    device: str
    gpu_ns: int
    kernels: tuple[KernelTime, ...]


def normalised_name(name: str) -> str:
    """``name`` with the spelling the two tools differ on made one: casts before template
    arguments dropped (a boolean's written ``true``/``false``), whitespace runs one space."""
    for cast, word in _BOOL.items():
        name = name.replace(cast, word)
    return _SPACES.sub(" ", _CAST.sub("", name)).strip()


def short_name(name: str) -> str:
    """A kernel's base name, as nsys's ``shortName`` has it: the identifier before its
    template arguments and parameters, without return type or namespaces
    (``void flash::flash_fwd_kernel<...>(...)`` -> ``flash_fwd_kernel``); a name with none
    of those (a Triton kernel, a cuBLAS ``sm90_xmma_...``) is itself."""
    name = name.replace("(anonymous namespace)::", "")
    end = min((i for i in (name.find("<"), name.find("(")) if i >= 0), default=len(name))
    head = name[:end].strip()
    return head.split(" ")[-1].split("::")[-1] or name


def read_trace(path: Path) -> TraceProfile:
    """The kernels of the trace at ``path``; :class:`TraceError` on anything else."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TraceError(f"{path}: cannot read it: {exc.strerror}") from None
    if raw.startswith(_SQLITE_MAGIC):
        device, times = _nsys(path)
        return _profile(path, hashlib.sha256(raw).hexdigest(), NSYS_SQLITE, device, times)
    return chrome_trace(raw, path)


def chrome_trace(raw: bytes, label: str | Path) -> TraceProfile:
    """The kernels of a torch.profiler Chrome trace (gzipped or not) already read, named
    ``label`` in errors: the self-check's own trace arrives from its child this way."""
    digest = hashlib.sha256(raw).hexdigest()
    if raw.startswith(_GZIP_MAGIC):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TraceError(f"{label}: a gzip file that does not decompress ({exc})") from None
    device, times = _chrome(label, raw)
    return _profile(label, digest, TORCH_PROFILER, device, times)


def _profile(
    path: str | Path, digest: str, source: str, device: str, times: Iterable[tuple[str, str, int]]
) -> TraceProfile:
    by_name: dict[str, list[int]] = {}
    short: dict[str, str] = {}
    for name, base, ns in times:
        key = normalised_name(name)
        by_name.setdefault(key, []).append(ns)
        short.setdefault(key, base or short_name(key))
    if not by_name:
        what = "Nsight Systems export" if source == NSYS_SQLITE else "torch.profiler trace"
        raise NoKernelEvents(
            f"{path}: a {what} with no GPU kernel events (a CPU-only profile); profile the "
            "step on a GPU with CUDA activities (ProfilerActivity.CUDA, nsys --trace=cuda)"
        )
    total = sum(sum(v) for v in by_name.values())
    if total <= 0:
        raise TraceError(f"{path}: every kernel lasted 0 ns; the trace's times are not usable")
    kernels = sorted(
        (KernelTime(k, short[k], len(v), sum(v), sum(v) / total) for k, v in by_name.items()),
        key=lambda t: (-t.gpu_ns, t.name),
    )
    return TraceProfile(digest, source, device, total, tuple(kernels))


def _chrome(path: str | Path, raw: bytes) -> tuple[str, list[tuple[str, str, int]]]:
    try:
        obj = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise TraceError(f"{path}: not JSON ({exc}); a truncated trace? export it again") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("traceEvents"), list):
        raise TraceError(
            f"{path}: no traceEvents list: not a torch.profiler Chrome trace or an Nsight "
            "Systems SQLite export"
        )
    times = []
    for index, event in enumerate(obj["traceEvents"]):
        if not isinstance(event, dict) or event.get("cat") != "kernel" or event.get("ph") != "X":
            continue
        name, dur = event.get("name"), event.get("dur")
        if not isinstance(name, str) or not _duration(dur):
            raise TraceError(
                f"{path}: kernel event #{index} has no name or a bad duration ({dur!r}); "
                "the trace is damaged"
            )
        times.append((name, "", round(float(dur) * 1000)))
    return _chrome_device(obj.get("deviceProperties")), times


def _duration(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value >= 0


def _chrome_device(properties: Any) -> str:
    if isinstance(properties, list) and properties and isinstance(properties[0], Mapping):
        return str(properties[0].get("name", ""))
    return ""


def _nsys(path: Path) -> tuple[str, list[tuple[str, str, int]]]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open it as SQLite: {exc}") from None
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            # nsys creates the table only when a kernel ran: a CPU-only profile has none.
            return "", []
        if "StringIds" not in tables:
            raise TraceError(f"{path}: an Nsight Systems export without its StringIds table")
        rows = conn.execute(
            """SELECT coalesce(d.value, s.value), s.value, k."end" - k.start
            FROM CUPTI_ACTIVITY_KIND_KERNEL k
                JOIN StringIds s ON s.id = k.shortName
                LEFT JOIN StringIds d ON d.id = k.demangledName"""
        ).fetchall()
        device = ""
        if "TARGET_INFO_GPU" in tables:
            found = conn.execute("SELECT name FROM TARGET_INFO_GPU LIMIT 1").fetchone()
            device = str(found[0]) if found else ""
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{path}: not a readable Nsight Systems export: {exc}") from None
    finally:
        conn.close()
    bad = [row for row in rows if row[2] is None or row[2] < 0]
    if bad:
        raise TraceError(f"{path}: {len(bad)} kernel(s) end before they start; the export is "
                         "damaged")  # fmt: skip
    return device, [(full, base, int(ns)) for full, base, ns in rows]
