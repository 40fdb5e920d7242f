"""Submitting runs without ever losing one: ingest when the database answers, otherwise
write the run to the spool directory, and load spooled runs later (``kernelwatch db
replay``). Idempotent ingest makes a replay of a run that did get in (the connection broke
during COMMIT) a no-op, so every run lands exactly once."""

from __future__ import annotations

import contextlib
import fcntl
import re
import shutil
import uuid
from collections.abc import Iterator
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
#: A run file is read whole into memory, several times its size as Python objects: a file
#: larger than this could take the worker's memory.
MAX_FILE_BYTES = 256 * 1024 * 1024
#: Records nest a handful of levels (a case's params, a config's meta); deeper than this is
#: hostile, and well under the depth where json's decoder or the record readers recurse out.
MAX_DEPTH = 64
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


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
        """Ingest ``run``, or spool it when the database cannot take it, whatever the reason
        (unreachable, another schema, a value it refuses): a night's results are never lost
        to the store."""
        try:
            result = self._get().ingest(run)
        except (StoreUnavailable, SchemaMismatch, psycopg.Error) as exc:
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
    """Spooled run files, oldest first (anything else named ``*.jsonl``, such as a
    directory, is not a run file: ``replay`` rejects it)."""
    if not spool_dir.is_dir():
        return []
    found = []
    for path in spool_dir.glob("*.jsonl"):
        with contextlib.suppress(FileNotFoundError):  # replayed meanwhile by another process
            found.append((path.stat().st_mtime, path.name, path))
    return [path for *_, path in sorted(found)]


def replay(config: StoreConfig | None = None) -> ReplayReport:
    """Ingest every spooled run, removing each file once its transaction committed. Stops,
    leaving the rest, if the database becomes unreachable; a file that cannot be replayed
    (unreadable, malformed, over :data:`MAX_FILE_BYTES` or :data:`MAX_DEPTH`, or refused by
    the database) moves to ``rejected/`` beside a ``.reason`` file, and the rest go on.
    Replays running at once take turns."""
    config = config or load().database
    report = ReplayReport()
    if not pending(config.spool_dir):
        return report
    with _replay_lock(config.spool_dir):
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
                    _check_limits(path)
                    result = ingester.ingest(read_run_file(path))
                except psycopg.OperationalError as exc:
                    report.remaining, report.reason = len(files) - index, _one_line(exc)
                    return report
                except (RecordError, OSError, UnicodeDecodeError, psycopg.Error) as exc:
                    reason = f"{type(exc).__name__}: {_one_line(exc)}"
                    report.rejected.append((_reject(path, config.spool_dir, reason), reason))
                    continue
                (report.loaded if result.stored else report.duplicates).append(result.run_id)
                path.unlink()
    return report


@contextlib.contextmanager
def _replay_lock(spool_dir: Path) -> Iterator[None]:
    with open(spool_dir / ".replay.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _check_limits(path: Path) -> None:
    """Refuse, before parsing, a file too big or nested too deep to read safely."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise RecordError(f"{path}: {size} bytes, more than a run file's {MAX_FILE_BYTES}")
    with open(path) as handle:
        for number, line in enumerate(handle, 1):
            depth = deepest = 0
            for bracket in _NOT_BRACKET.sub("", _STRING.sub("", line)):
                depth += 1 if bracket in "[{" else -1
                deepest = max(deepest, depth)
                if deepest > MAX_DEPTH:
                    raise RecordError(
                        f"{path}:{number}: JSON nested too deep (over {MAX_DEPTH} levels)"
                    )


def _reject(path: Path, spool_dir: Path, reason: str) -> Path:
    target = spool_dir / REJECTED / path.name
    target.parent.mkdir(exist_ok=True)
    if target.exists():
        target = target.with_name(f"{path.stem}-{uuid.uuid4().hex[:8]}{path.suffix}")
    shutil.move(path, target)
    target.with_name(target.name + ".reason").write_text(reason + "\n")
    return target


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
