"""The stored columns' one declaration (``store/columns.py``) against the migrated tables and
the records' fields."""

from __future__ import annotations

import dataclasses
from typing import Any, get_args, get_type_hints

import psycopg

from kernelwatch.harness.records import Measurement, Summary
from kernelwatch.store.columns import MEASUREMENTS, TABLES, Table


def schema_differences(conn: psycopg.Connection, tables: tuple[Table, ...]) -> list[str]:
    """Each column declared but not in its table, in its table but not declared, or of
    another type there, as one line."""
    out = []
    for table in tables:
        names = [c.name for c in table.columns]
        out += [f"{table.name}.{n}: declared twice" for n in names if names.count(n) > 1]
        declared = {c.name: c.type for c in table.columns}
        migrated = dict(
            conn.execute(
                """SELECT column_name, data_type FROM information_schema.columns
                WHERE table_schema = 'public' AND table_name = %s""",
                (table.name,),
            ).fetchall()
        )
        for name in sorted(declared.keys() | migrated.keys()):
            if name not in migrated:
                out.append(f"{table.name}.{name}: declared, not in the table")
            elif name not in declared:
                out.append(f"{table.name}.{name}: in the table, not declared")
            elif declared[name] != migrated[name]:
                out.append(f"{table.name}.{name}: declared {declared[name]}, is {migrated[name]}")
    return out


def test_declaration_equals_the_migrated_tables(store_url):
    with psycopg.connect(store_url) as conn:
        assert schema_differences(conn, TABLES) == []
        conn.execute("ALTER TABLE measurements ADD COLUMN p99_ns double precision")
        conn.execute("ALTER TABLE build_metrics DROP COLUMN cached")
        conn.execute("ALTER TABLE correctness_results ALTER COLUMN seed TYPE integer")
        assert schema_differences(conn, TABLES) == [
            "measurements.p99_ns: in the table, not declared",
            "correctness_results.seed: declared bigint, is integer",
            "build_metrics.cached: declared, not in the table",
        ]


def test_every_record_field_is_stored_or_kept_in_extra():
    assert {t.name: t.undecided for t in TABLES} == dict.fromkeys((t.name for t in TABLES), ())


def test_a_record_field_added_without_a_decision_is_caught():
    summary = dataclasses.make_dataclass(
        "Summary", [("p99_ns", float | None, None)], bases=(Summary,), frozen=True
    )
    record = dataclasses.make_dataclass(
        "Measurement",
        [("summary", summary | None, None), ("power_cap_w", float | None, None)],
        bases=(Measurement,),
        frozen=True,
    )
    grown = dataclasses.replace(MEASUREMENTS, record=record)
    assert grown.undecided == ("summary.p99_ns", "power_cap_w")
    # Ingest keeps an undecided field in extra all the same: nothing is lost meanwhile.
    assert grown.kept_in_extra == (*MEASUREMENTS.extra, "summary.p99_ns", "power_cap_w")
    decided = dataclasses.replace(grown, extra=(*MEASUREMENTS.extra, "power_cap_w"))
    assert decided.undecided == ("summary.p99_ns",)
    assert decided.kept_in_extra == (*MEASUREMENTS.extra, "power_cap_w", "summary.p99_ns")


def test_every_declared_record_path_exists():
    for table in TABLES:
        paths = [c.path for c in table.columns if c.path is not None]
        paths += [r for c in table.columns for r in c.reads]
        paths += [*table.elsewhere, *table.extra]
        assert [p for p in paths if not _exists(table.record, p)] == [], table.name


def _exists(cls: Any, path: str) -> bool:
    for part in path.split("."):
        if cls is None or part not in {f.name for f in dataclasses.fields(cls)}:
            return False
        hint = get_type_hints(cls)[part]
        cls = next((o for o in (*get_args(hint), hint) if dataclasses.is_dataclass(o)), None)
    return True
