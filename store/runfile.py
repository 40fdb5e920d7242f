"""A run as data: its header and records, and its JSON-lines file form (first line the
RunInfo, then one record a line), which the spool and ``kernelwatch db replay`` read."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelwatch.harness.records import (
    BuildMetrics,
    CorrectnessResult,
    Measurement,
    RecordError,
    RunInfo,
    read_record,
)

RunRecord = Measurement | CorrectnessResult | BuildMetrics


@dataclass(frozen=True)
class Run:
    """One run: the header and every record it produced."""

    info: RunInfo
    records: tuple[RunRecord, ...]

    @classmethod
    def of(cls, info: RunInfo, records: Iterable[RunRecord]) -> Run:
        return cls(info, tuple(records))


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(run: Run) -> Run:
    """``run`` with every text made storable in PostgreSQL: NUL characters and unpaired
    surrogates (what undecodable bytes from a kernel's output become) are replaced by U+FFFD.
    Records without such text are returned as they are, without a copy."""
    return _clean(run)  # type: ignore[no-any-return]


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        if "\x00" in value or _SURROGATE.search(value):
            return _SURROGATE.sub("\ufffd", value.replace("\x00", "\ufffd"))
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changed = {}
        for f in dataclasses.fields(value):
            old = getattr(value, f.name)
            new = _clean(old)
            if new is not old:
                changed[f.name] = new
        return dataclasses.replace(value, **changed) if changed else value
    if isinstance(value, Mapping):
        items = [(_clean(k), _clean(v)) for k, v in value.items()]
        pairs = zip(items, value.items(), strict=True)
        same = all(k is k0 and v is v0 for (k, v), (k0, v0) in pairs)
        return value if same else dict(items)
    if isinstance(value, tuple | list) and value and not isinstance(value[0], int | float):
        cleaned = [_clean(v) for v in value]
        same = all(a is b for a, b in zip(cleaned, value, strict=True))
        return value if same else type(value)(cleaned)
    return value


def read_run_file(path: Path) -> Run:
    """Read a JSON-lines run file; raises RecordError naming the file and line when it is
    malformed (nested too deep included)."""
    info: RunInfo | None = None
    records: list[RunRecord] = []
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = read_record(json.loads(line))
            except (json.JSONDecodeError, RecordError) as exc:
                raise RecordError(f"{path}:{number}: {exc}") from exc
            except RecursionError as exc:  # json's decoder gives up on deep nesting this way
                raise RecordError(f"{path}:{number}: JSON nested too deep to read") from exc
            if isinstance(record, RunInfo):
                if info is not None:
                    raise RecordError(f"{path}:{number}: a second run header")
                info = record
            elif info is None:
                raise RecordError(f"{path}:{number}: the first record must be the run header")
            else:
                records.append(record)
    if info is None:
        raise RecordError(f"{path}: empty run file")
    return Run(info, tuple(records))


def write_run_file(run: Run, path: Path) -> None:
    """Write ``run`` to ``path`` atomically: a reader sees the whole file or none of it."""
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "w") as handle:
        handle.write(run.info.dumps() + "\n")
        for record in run.records:
            handle.write(record.dumps() + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
