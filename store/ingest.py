"""Ingest: a whole run in one transaction, measurements and samples through binary COPY,
idempotent by run UUID.

A run whose UUID is already stored is skipped (``IngestResult.stored`` False): submitting it
again neither duplicates nor fails. Concurrent writers of the same run serialise on the
unique run UUID; new dimension rows (series, kernels, configs) are inserted in key order so
concurrent runs never deadlock. Record fields the schema has no column for yet (the records
may gain optional fields) are kept in each row's ``extra`` JSONB, so nothing is dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import psycopg
from psycopg.types.json import Jsonb

from kernelwatch.harness.records import (
    BuildMetrics,
    CorrectnessResult,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    RunInfo,
    SoftwareInfo,
)
from kernelwatch.store import copyframe
from kernelwatch.store.columns import (
    BUILDS,
    CORRECTNESS,
    ENVIRONMENT,
    RUNS,
    TABLES,
    Table,
    attribute,
)
from kernelwatch.store.device_time import insert_stages
from kernelwatch.store.identity import canonical_params, case_key, series_key
from kernelwatch.store.measurement_rows import COLUMNS as MEASUREMENT_COLUMNS
from kernelwatch.store.measurement_rows import rows as measurement_rows
from kernelwatch.store.night_stats import add_night_stats, kernel_nights
from kernelwatch.store.runfile import Run, storable
from kernelwatch.store.samples import COLUMNS as SAMPLE_COLUMNS
from kernelwatch.store.samples import SampleBatch

# Runs on the tracked branch: their measurements are the series' history and latest value.
HISTORY_TRIGGERS = ("nightly", "manual")
# A measurement's id is its run's id shifted left by this, plus its position in the run.
MEASUREMENT_ID_SHIFT = 24
# Measurements framed and sent at a time: small enough that a chunk fits the socket buffer
# and the server stores it while the next is framed, large enough that numpy's per-call
# overhead stays small.
_CHUNK = 256
_PG_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)

# Record fields without a column, kept in each row's ``extra``: see ``columns.Table``.
_KEPT = {table.record: table.kept_in_extra for table in TABLES}
_INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(c.name for c in RUNS.written)}) "
    f"VALUES ({', '.join(['%s'] * len(RUNS.written))}) "
    "ON CONFLICT (run_id) DO NOTHING RETURNING id, started_at"
)


@dataclass(frozen=True)
class IngestResult:
    """What one ``ingest`` call stored. ``stored`` is False when the run UUID was already in
    the database (nothing was written)."""

    run_id: str
    stored: bool
    measurements: int = 0
    samples: int = 0
    correctness: int = 0
    builds: int = 0


class Ingester:
    """Writes runs through one connection. Keeps the ids of dimension rows (repositories,
    kernels, series, ...) it has seen committed, so a steady stream of runs costs no
    look-ups."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn
        self._ids: dict[tuple[Any, ...], int] = {}
        self._pending: dict[tuple[Any, ...], int] = {}
        self._keys: dict[tuple[Any, ...], str] = {}
        # Kernel id -> the family this connection has seen committed for it, and pending.
        self._families: dict[int, str] = {}
        self._pending_families: dict[int, str] = {}

    def ingest(self, run: Run) -> IngestResult:
        """Store ``run`` and all its records in one transaction, or nothing at all. Text the
        database cannot hold (a NUL byte from a kernel's stderr) is replaced first."""
        run = storable(run)
        info = run.info
        self._pending = {}
        self._pending_families = {}
        with self.conn.transaction():
            cur = self.conn.cursor()
            found = cur.execute("SELECT 1 FROM runs WHERE run_id = %s", (info.run_id,))
            if found.fetchone() is not None:
                return IngestResult(info.run_id, stored=False)
            measurements = [r for r in run.records if isinstance(r, Measurement)]
            checks = [r for r in run.records if isinstance(r, CorrectnessResult)]
            builds = [r for r in run.records if isinstance(r, BuildMetrics)]
            inserted = self._insert_run(cur, info, measurements, checks, builds)
            if inserted is None:  # a concurrent writer committed the same run first
                return IngestResult(info.run_id, stored=False)
            run_pk, started_at = inserted
            insert_stages(cur, run_pk, info.stages)
            self._kernel_families(cur, info, [*builds, *checks, *measurements])
            samples, series_ids = self._measurements(cur, info, run_pk, started_at, measurements)
            self._correctness(cur, info, run_pk, checks)
            self._builds(cur, info, run_pk, builds)
            if info.trigger in HISTORY_TRIGGERS and measurements:
                self._night_stats(cur, info, run_pk, started_at, measurements, series_ids)
        self._ids.update(self._pending)
        self._families.update(self._pending_families)
        return IngestResult(info.run_id, True, len(measurements), samples, len(checks), len(builds))

    def _insert_run(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        measurements: Sequence[Measurement],
        checks: Sequence[CorrectnessResult],
        builds: Sequence[BuildMetrics],
    ) -> tuple[int, datetime] | None:
        """Insert the run's row; its id and start time (as the server stored it), or None
        when the run is there already."""
        repository_id = self._repository(cur, info.repository)
        commit_id = None
        if info.commit is not None:
            c = info.commit
            commit_id = self._dimension(
                cur,
                "commits",
                {"repository_id": repository_id, "sha": c.sha},
                {"parents": list(c.parents), "author_time": c.author_time,
                 "message": c.message, "branch": c.branch},
            )  # fmt: skip
        rel_cis = [m.summary.rel_ci_halfwidth for m in measurements if m.summary is not None]
        given = {
            "repository_id": repository_id,
            "commit_id": commit_id,
            "device_id": self._device(cur, info.device),
            "environment_id": self._environment(cur, info.software),
            "measurements": len(measurements),
            "measurement_errors": sum(m.status == "error" for m in measurements),
            "samples": sum(len(m.samples_ns) for m in measurements),
            "throttled_samples": sum(m.throttled.count(True) for m in measurements),
            "mean_rel_ci": sum(rel_cis) / len(rel_cis) if rel_cis else None,
            "correctness": len(checks),
            "correctness_failed": sum(c.verdict in ("fail", "error") for c in checks),
            "builds": len(builds),
            "extra": _jsonb(_extra(info)),
        }
        values = [given[c.name] if c.path is None else c.value(info) for c in RUNS.written]
        row = cur.execute(_INSERT_RUN, values).fetchone()
        return None if row is None else (row[0], row[1])

    def _measurements(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        run_pk: int,
        started_at: datetime,
        records: Sequence[Measurement],
    ) -> tuple[int, Sequence[int]]:
        """COPY the measurements and their samples; returns how many samples (kernel and
        baseline) were stored, and each record's series. Rows are framed and sent a chunk at a
        time, so the server stores one chunk while this process frames the next."""
        if not records:
            return 0, []
        if len(records) >= 1 << MEASUREMENT_ID_SHIFT:
            raise ValueError(f"a run holds at most {1 << MEASUREMENT_ID_SHIFT} measurements")
        repository_id = self._repository(cur, info.repository)
        series_ids = self._series(cur, info, repository_id, records)
        config_ids = self._configs(cur, [m.config for m in records])
        ids = (run_pk << MEASUREMENT_ID_SHIFT) + np.arange(len(records), dtype=np.int64)
        chunks = [slice(i, i + _CHUNK) for i in range(0, len(records), _CHUNK)]
        batches = []
        with _copy(cur, "samples", SAMPLE_COLUMNS) as copy:
            for chunk in chunks:
                batches.append(SampleBatch(records[chunk]))
                copy.write(batches[-1].rows(ids[chunk]))
        measured_at_us = (started_at - _PG_EPOCH) // timedelta(microseconds=1)
        with _copy(cur, "measurements", MEASUREMENT_COLUMNS) as copy:
            for chunk, batch in zip(chunks, batches, strict=True):
                part = records[chunk]
                extras = [
                    _extra_json(m, info, i in batch.irregular_clocks, i in batch.irregular_flags)
                    for i, m in enumerate(part)
                ]
                given = {
                    "id": ids[chunk],
                    "run_id": run_pk,
                    "series_id": series_ids[chunk],
                    "measured_at": measured_at_us,
                    "history": info.trigger in HISTORY_TRIGGERS,
                    "config_id": config_ids[chunk],
                    "sample_count": batch.kernel.lengths,
                    "throttled_count": batch.throttled_counts,
                    "extra": extras,
                }
                copy.write(measurement_rows(part, given))
        return sum(batch.count for batch in batches), series_ids

    def _night_stats(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        run_pk: int,
        started_at: datetime,
        records: Sequence[Measurement],
        series_ids: Sequence[int],
    ) -> None:
        """A history run's per-kernel sums and its series' point counts (store/night_stats),
        its points filed as their series' latest where they are, and its GPU model's
        latest movers."""
        repository_id = self._repository(cur, info.repository)
        named = sorted({(m.case.suite, m.case.kernel) for m in records})
        kernel_ids = {sk: self._kernel(cur, repository_id, *sk) for sk in named}
        nights = kernel_nights(records, kernel_ids)
        add_night_stats(cur, run_pk, started_at, nights, series_ids)
        # Each series' latest point, read by the "latest nightly" panels (migration 0016),
        # and the latest run's most slowed cases, listed first by the morning panel (0017).
        cur.execute("SELECT latest_points_add(%s)", (run_pk,))
        cur.execute("SELECT night_movers_refresh(%s)", (run_pk,))

    def _correctness(
        self, cur: psycopg.Cursor, info: RunInfo, run_pk: int, records: Sequence[CorrectnessResult]
    ) -> None:
        if not records:
            return
        repository_id = self._repository(cur, info.repository)
        kernel_ids = [
            self._kernel(cur, repository_id, r.case.suite, r.case.kernel) for r in records
        ]
        config_ids = self._configs(cur, [r.config for r in records])
        given = {
            "run_id": [run_pk] * len(records),
            "kernel_id": kernel_ids,
            "case_key": [case_key(r.case) for r in records],
            "config_id": config_ids,
            "extra": [_extra(r, info) for r in records],
        }
        _copy_records(cur, CORRECTNESS, records, given)

    def _builds(
        self, cur: psycopg.Cursor, info: RunInfo, run_pk: int, records: Sequence[BuildMetrics]
    ) -> None:
        if not records:
            return
        repository_id = self._repository(cur, info.repository)
        kernel_ids = [self._kernel(cur, repository_id, r.suite, r.kernel) for r in records]
        config_ids = self._configs(cur, [r.config for r in records])
        given = {
            "run_id": [run_pk] * len(records),
            "kernel_id": kernel_ids,
            "config_id": config_ids,
            "extra": [_extra(r) for r in records],
        }
        _copy_records(cur, BUILDS, records, given)

    def _series(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        repository_id: int,
        records: Sequence[Measurement],
    ) -> list[int]:
        keys = [self._series_key(info.repository, m) for m in records]
        missing = {
            k: m for k, m in zip(keys, records, strict=True) if ("series", k) not in self._ids
        }
        if missing:
            self._resolve_series(cur, info, repository_id, missing)
        known = {**self._ids, **self._pending}
        return [known["series", k] for k in keys]

    def _series_key(self, repository: str, m: Measurement) -> str:
        # Hashing canonical JSON costs ~10 us a record; the tuple of the same identity is a
        # few times cheaper to build, and equal for every run of the same case.
        c = m.case
        fabric = m.world.fabric() if m.world is not None else None
        memo = (repository, c.suite, c.kernel, c.dtype, tuple(c.params.items()), m.device.name,
                m.method, fabric)  # fmt: skip
        key = self._keys.get(memo)
        if key is None:
            key = self._keys[memo] = series_key(repository, c, m.device.name, m.method, fabric)
        return key

    def _resolve_series(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        repository_id: int,
        missing: dict[str, Measurement],
    ) -> None:
        def lookup(keys: list[str]) -> None:
            rows = cur.execute("SELECT key, id FROM series WHERE key = ANY(%s)", (keys,))
            self._pending.update({("series", key): sid for key, sid in rows})

        lookup(list(missing))
        new = sorted(k for k in missing if ("series", k) not in self._pending)
        if not new:
            return
        # Kernels first, in name order, so concurrent runs take their locks in one order.
        kernels = sorted({(missing[k].case.suite, missing[k].case.kernel) for k in new})
        kernel_ids = {sk: self._kernel(cur, repository_id, *sk) for sk in kernels}
        rows = []
        for key in new:
            m = missing[key]
            kernel_id = kernel_ids[m.case.suite, m.case.kernel]
            rows.append((
                key, kernel_id, case_key(m.case), m.case.workload, canonical_params(m.case),
                m.case.dtype, m.device.name, m.method.timer, m.method.l2,
                m.method.harness_version, m.world.fabric() if m.world is not None else None,
            ))  # fmt: skip
        inserted = cur.execute(
            """INSERT INTO series (key, kernel_id, case_key, workload, params, dtype,
                device_model, timer, l2, harness_version, fabric)
            SELECT * FROM unnest(%s::text[], %s::int[], %s::text[], %s::text[], %s::jsonb[],
                %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::text[])
            ON CONFLICT (key) DO NOTHING RETURNING id""",
            [list(column) for column in zip(*rows, strict=True)],
        ).fetchall()
        lookup(new)
        self._annotate_method_changes(cur, info, [row[0] for row in inserted])

    def _annotate_method_changes(
        self, cur: psycopg.Cursor, info: RunInfo, new_ids: list[int]
    ) -> None:
        """A case measured with a new method starts a new series; mark where it happened, so
        the jump between the two lines is never read as a regression."""
        if not new_ids:
            return
        cur.execute(
            """INSERT INTO annotations (at, kind, text, repository_id, series_id, device_model)
            SELECT DISTINCT ON (n.id) %s, 'method_change',
                format('measurement method changed from %%s/%%s/h%%s to %%s/%%s/h%%s',
                    o.timer, o.l2, o.harness_version, n.timer, n.l2, n.harness_version),
                k.repository_id, n.id, n.device_model
            FROM series n
                JOIN kernels k ON k.id = n.kernel_id
                JOIN series o ON o.kernel_id = n.kernel_id AND o.case_key = n.case_key
                    AND o.device_model = n.device_model AND o.id <> ALL(%s)
            WHERE n.id = ANY(%s)
            ORDER BY n.id, o.created_at DESC""",
            (info.started_at, new_ids, new_ids),
        )

    def _kernel_families(
        self,
        cur: psycopg.Cursor,
        info: RunInfo,
        records: Sequence[BuildMetrics | CorrectnessResult | Measurement],
    ) -> None:
        """Store each kernel's family as the run's records name it (a check's or a timing's
        over a build's): a new kernel takes it, and a run on the tracked branch moves a known
        kernel to it. A kernel's family is the one its latest nightly declared; a PR check or
        a bisection probe of an older commit leaves it."""
        named = {
            (r.suite, r.kernel) if isinstance(r, BuildMetrics) else (r.case.suite, r.case.kernel):
                r.family if isinstance(r, BuildMetrics) else r.case.family
            for r in records
        }  # fmt: skip
        repository_id = self._repository(cur, info.repository)
        # In name order, as the kernels of new series: concurrent runs lock in one order.
        for (suite, name), family in sorted(named.items()):
            kernel_id = self._dimension(
                cur,
                "kernels",
                {"repository_id": repository_id, "suite": suite, "name": name},
                {"family": family},
            )
            if info.trigger in HISTORY_TRIGGERS and self._families.get(kernel_id) != family:
                cur.execute(
                    "UPDATE kernels SET family = %s WHERE id = %s AND family <> %s",
                    (family, kernel_id, family),
                )
                self._pending_families[kernel_id] = family

    def _configs(
        self, cur: psycopg.Cursor, configs: Iterable[LaunchConfig | None]
    ) -> list[int | None]:
        configs = list(configs)
        # Records of a run often share one config object: label each object once.
        by_object = {id(c): c.label() for c in {id(c): c for c in configs if c}.values()}
        labels = [None if c is None else by_object[id(c)] for c in configs]
        by_label = {label: c for label, c in zip(labels, configs, strict=True) if label}
        for label in sorted(by_label):
            self._dimension(
                cur,
                "configs",
                {"label": label},
                {"config": json.dumps(_config_json(by_label[label]))},
            )
        known = {**self._ids, **self._pending}
        return [None if label is None else known["configs", (label,)] for label in labels]

    def _repository(self, cur: psycopg.Cursor, name: str) -> int:
        return self._dimension(cur, "repositories", {"name": name}, {})

    def _kernel(self, cur: psycopg.Cursor, repository_id: int, suite: str, name: str) -> int:
        return self._dimension(
            cur, "kernels", {"repository_id": repository_id, "suite": suite, "name": name}, {}
        )

    def _device(self, cur: psycopg.Cursor, device: DeviceInfo) -> int:
        return self._dimension(
            cur,
            "devices",
            {"kind": device.kind, "model": device.name, "host": device.host, "uuid": device.uuid,
             "arch": device.capability, "sm_count": device.sm_count,
             "l2_bytes": device.l2_bytes, "interpreter": device.interpreter},
            {},
        )  # fmt: skip

    def _environment(self, cur: psycopg.Cursor, software: SoftwareInfo) -> int:
        return self._dimension(
            cur, "environments", {f: getattr(software, f) for f in ENVIRONMENT}, {}
        )

    def _dimension(
        self, cur: psycopg.Cursor, table: str, key: dict[str, Any], other: dict[str, Any]
    ) -> int:
        """The id of the row of ``table`` whose unique ``key`` columns match, inserted (with
        ``other`` columns) when missing."""
        cache_key = (table, tuple(key.values()))
        if cache_key in self._ids:
            return self._ids[cache_key]
        if cache_key in self._pending:
            return self._pending[cache_key]
        columns = {**key, **other}
        names = ", ".join(columns)
        marks = ", ".join(["%s"] * len(columns))
        row = cur.execute(
            f"INSERT INTO {table} ({names}) VALUES ({marks}) "
            f"ON CONFLICT ({', '.join(key)}) DO NOTHING RETURNING id",
            list(columns.values()),
        ).fetchone()
        if row is None:  # it exists (perhaps committed just now by a concurrent writer)
            match = " AND ".join(f"{name} IS NOT DISTINCT FROM %s" for name in key)
            row = cur.execute(
                f"SELECT id FROM {table} WHERE {match}", list(key.values())
            ).fetchone()
        self._pending[cache_key] = row[0]
        return row[0]


@contextmanager
def _copy(cur: psycopg.Cursor, table: str, columns: Sequence[str]) -> Iterator[psycopg.Copy]:
    """A binary COPY into ``table`` taking framed rows (``copyframe``): the header and
    trailer are written here."""
    with cur.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.write(copyframe.HEADER)
        yield copy
        copy.write(copyframe.TRAILER)


def _copy_records(
    cur: psycopg.Cursor, table: Table, records: Sequence[Any], given: dict[str, Sequence[Any]]
) -> None:
    """COPY one row of ``table`` per record: read columns from the records, given columns from
    ``given`` (one value per record)."""
    columns = [
        given[c.name] if c.path is None else [_plain(c.value(r), c.type) for r in records]
        for c in table.written
    ]
    names = ", ".join(c.name for c in table.written)
    with cur.copy(f"COPY {table.name} ({names}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types([c.type for c in table.written])
        for row in zip(*columns, strict=True):
            copy.write_row(row)


def _plain(value: Any, pg_type: str) -> Any:
    """A record's value as psycopg dumps it: a jsonb mapping as a plain dict."""
    return dict(value) if pg_type == "jsonb" and value is not None else value


def _extra(
    record: Any,
    info: RunInfo | None = None,
    keep_clocks: bool = False,
    keep_flags: bool = False,
) -> dict[str, Any] | None:
    """Fields without a column, a device or software differing from the run's, and clocks
    or flags the samples row cannot hold exactly (see ``SampleBatch``): plain JSON values,
    or None in the usual case of nothing to keep."""
    text = _extra_json(record, info, keep_clocks, keep_flags)
    return None if text is None else json.loads(text)


def _extra_json(
    record: Any,
    info: RunInfo | None = None,
    keep_clocks: bool = False,
    keep_flags: bool = False,
) -> str | None:
    """``_extra`` as JSON text."""
    # A field at its empty default (a single-GPU case's world) is not worth a row's extra.
    values = {path: attribute(record, path) for path in _KEPT[type(record)]}
    kept = {path: v for path, v in values.items() if v is not None and v != ()}
    if keep_clocks:
        kept["sm_clock_mhz"] = record.sm_clock_mhz
        kept["mem_clock_mhz"] = record.mem_clock_mhz
    if keep_flags:
        kept["throttled"] = record.throttled
        kept["baseline_throttled"] = record.baseline_throttled
    if info is not None:
        if record.device is not info.device and record.device != info.device:
            kept["device"] = record.device
        if record.software is not info.software and record.software != info.software:
            kept["software"] = record.software
    return json.dumps(kept, default=_json_default) if kept else None


def _jsonb(value: dict[str, Any] | None) -> Jsonb | None:
    return None if value is None else Jsonb(value)


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "__dataclass_fields__"):
        return {f: getattr(value, f) for f in value.__dataclass_fields__}
    return dict(value)


def _config_json(config: LaunchConfig) -> dict[str, Any]:
    return {"meta": dict(config.meta), "num_warps": config.num_warps,
            "num_stages": config.num_stages}  # fmt: skip
