"""Submitting runs without ever losing one: ingest when the database answers, otherwise
write the run to the spool directory, and load spooled runs later (``kernelwatch db
replay``). Idempotent ingest makes a replay of a run that did get in (the connection broke
during COMMIT) a no-op, so every run lands exactly once."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from kernelwatch.config.database import StoreConfig
from kernelwatch.config.settings import load
from kernelwatch.harness.records import RecordError
from kernelwatch.store.connect import SchemaMismatch, StoreUnavailable, connect, resolve
from kernelwatch.store.ingest import Ingester, IngestResult
from kernelwatch.store.runfile import Run, read_run_file, write_run_file

REJECTED = "rejected"


@dataclass(frozen=True)
class Submitted:
    """The fate of one submitted run: ``result`` when it reached the database, else
    ``spooled`` (the file) and ``reason`` (one line)."""

    run_id: str
    result: IngestResult | None = None
    spooled: Path | None = None
    reason: str = ""


@dataclass
class ReplayReport:
    """What ``replay`` did: runs loaded, already present, rejected (malformed files moved to
    ``rejected/``), and left in the spool because the database went away again."""

    loaded: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    rejected: list[tuple[Path, str]] = field(default_factory=list)
    remaining: int = 0
    reason: str = ""


class Submitter:
    """Ingests runs through one lazily opened connection; a run that cannot be ingested
    because the database is unreachable (now, or mid-transaction) goes to the spool."""

    def __init__(self, config: StoreConfig | None = None) -> None:
        self.config = config or load().database
        self._ingester: Ingester | None = None

    def submit(self, run: Run) -> Submitted:
        """Ingest ``run``, or spool it when the database cannot be reached."""
        try:
            result = self._get().ingest(run)
        except (StoreUnavailable, SchemaMismatch, psycopg.OperationalError) as exc:
            self.close()
            path = spool_run(run, self.config.spool_dir)
            return Submitted(run.info.run_id, spooled=path, reason=_one_line(exc))
        return Submitted(run.info.run_id, result=result)

    def close(self) -> None:
        """Close the connection, if one is open."""
        if self._ingester is not None:
            self._ingester.conn.close()
            self._ingester = None

    def _get(self) -> Ingester:
        if self._ingester is None or self._ingester.conn.closed:
            self._ingester = Ingester(connect(resolve(self.config).url))
        return self._ingester


def spool_run(run: Run, spool_dir: Path) -> Path:
    """Write ``run`` to ``spool_dir/<run_id>.jsonl`` atomically and return the path."""
    spool_dir.mkdir(parents=True, exist_ok=True)
    path = spool_dir / f"{run.info.run_id}.jsonl"
    write_run_file(run, path)
    return path


def pending(spool_dir: Path) -> list[Path]:
    """Spooled run files, oldest first."""
    if not spool_dir.is_dir():
        return []
    return sorted(spool_dir.glob("*.jsonl"), key=lambda p: (p.stat().st_mtime, p.name))


def replay(config: StoreConfig | None = None) -> ReplayReport:
    """Ingest every spooled run, removing each file once its transaction committed. Stops,
    leaving the rest, if the database becomes unreachable; moves malformed files aside."""
    config = config or load().database
    report = ReplayReport()
    files = pending(config.spool_dir)
    if not files:
        return report
    try:
        ingester = Ingester(connect(resolve(config).url))
    except (StoreUnavailable, SchemaMismatch) as exc:
        report.remaining, report.reason = len(files), _one_line(exc)
        return report
    with ingester.conn:
        for index, path in enumerate(files):
            try:
                result = ingester.ingest(read_run_file(path))
            except RecordError as exc:
                report.rejected.append((_reject(path, config.spool_dir), _one_line(exc)))
                continue
            except psycopg.OperationalError as exc:
                report.remaining, report.reason = len(files) - index, _one_line(exc)
                return report
            (report.loaded if result.stored else report.duplicates).append(result.run_id)
            path.unlink()
    return report


def _reject(path: Path, spool_dir: Path) -> Path:
    target = spool_dir / REJECTED / path.name
    target.parent.mkdir(exist_ok=True)
    shutil.move(path, target)
    return target


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
