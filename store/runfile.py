"""A run as data: its header and records, and its JSON-lines file form (first line the
RunInfo, then one record a line), which the spool and ``kernelwatch db replay`` read."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

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


def read_run_file(path: Path) -> Run:
    """Read a JSON-lines run file; raises RecordError naming the file and line when it is
    malformed."""
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
