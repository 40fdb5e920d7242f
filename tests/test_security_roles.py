"""Least privilege in the database: every write tried as each role (issue 17, finding 13)."""

from __future__ import annotations

import psycopg
import pytest
from psycopg import sql

READER, WRITER = "kernelwatch_reader", "kernelwatch_writer"


def _tables(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') ORDER BY 1"
    )
    return [name for (name,) in rows]


def _denied(conn: psycopg.Connection, role: str, statement: sql.Composable) -> bool:
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return True
    finally:
        conn.execute("RESET ROLE")
    return False


def test_reader_can_write_nothing_and_read_no_base_table(store_url):
    with psycopg.connect(store_url, autocommit=True) as conn:
        for table in _tables(conn):
            name = sql.Identifier(table)
            for statement in (
                sql.SQL("INSERT INTO {} DEFAULT VALUES").format(name),
                sql.SQL("UPDATE {t} SET {c} = {c}").format(
                    t=name, c=sql.Identifier(_first_column(conn, table))
                ),
                sql.SQL("DELETE FROM {}").format(name),
                sql.SQL("TRUNCATE {}").format(name),
                sql.SQL("SELECT 1 FROM {} LIMIT 1").format(name),
            ):
                assert _denied(conn, READER, statement), (table, statement.as_string(conn))
        # What Grafana reads stays readable.
        assert not _denied(conn, READER, sql.SQL("SELECT 1 FROM report_regressions LIMIT 1"))


def _first_column(conn: psycopg.Connection, table: str) -> str:
    row = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass AND attnum = 1",
        (table,),
    ).fetchone()
    return row[0]


def test_writer_cannot_change_the_schema_revision(store_url):
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert _denied(conn, WRITER, sql.SQL("UPDATE alembic_version SET version_num = 'x'"))
        assert _denied(conn, WRITER, sql.SQL("DELETE FROM alembic_version"))
        assert _denied(conn, WRITER, sql.SQL("DROP TABLE measurements"))
        assert not _denied(conn, WRITER, sql.SQL("SELECT version_num FROM alembic_version"))


def test_security_definer_functions_are_not_executable_by_public(store_url):
    with psycopg.connect(store_url, autocommit=True) as conn:
        functions = [
            sig
            for (sig,) in conn.execute(
                "SELECT p.oid::regprocedure::text FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.prosecdef"
            )
        ]
        assert functions
        conn.execute("DROP ROLE IF EXISTS kw_stranger")
        conn.execute("CREATE ROLE kw_stranger")
        try:
            for signature in functions:
                granted = conn.execute(
                    "SELECT has_function_privilege('kw_stranger', %s, 'EXECUTE'), "
                    "has_function_privilege(%s, %s, 'EXECUTE')",
                    (signature, READER, signature),
                ).fetchone()
                assert granted == (False, True), signature
        finally:
            conn.execute("DROP ROLE kw_stranger")


@pytest.mark.parametrize("role", [READER, WRITER])
def test_no_role_may_create_objects(store_url, role):
    with psycopg.connect(store_url, autocommit=True) as conn:
        assert _denied(conn, role, sql.SQL("CREATE TABLE kw_planted (x int)"))
