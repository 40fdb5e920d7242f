"""Each reporting view and function has one current definition, a file of ``store/views/``:
``migrate.upgrade`` drops them before the table migrations and makes them again from the files
when one changed, whatever revision the database started from (issue 45)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import psycopg
import pytest

from kernelwatch.store import migrate
from kernelwatch.store.connect import SchemaMismatch, connect

VERSIONS = Path(migrate.__file__).parent / "migrations" / "versions"
#: What a view or function statement looks like in SQL a migration runs.
VIEW_SQL = re.compile(r"\b(CREATE|DROP)\s+(OR\s+REPLACE\s+)?(VIEW|FUNCTION\s+report_)", re.I)


def _database(pg_server, name: str) -> str:
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return pg_server.url(name)


def _objects(url: str) -> dict[str, str]:
    """Every view's definition and every function's source, as PostgreSQL holds them, with
    the reader's and PUBLIC's rights on each."""
    with psycopg.connect(url) as conn:
        views = conn.execute(
            "SELECT viewname, pg_get_viewdef(format('%I', viewname)::regclass), "
            "has_table_privilege('kernelwatch_reader', format('%I', viewname), 'SELECT') "
            "FROM pg_views WHERE schemaname = 'public'"
        ).fetchall()
        functions = conn.execute(
            "SELECT p.oid::regprocedure::text, p.prosrc, p.prosecdef, "
            "has_function_privilege('kernelwatch_reader', p.oid, 'EXECUTE'), "
            "has_function_privilege('public', p.oid, 'EXECUTE') "
            "FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace"
        ).fetchall()
    found = {name: f"{sql} reader={reader}" for name, sql, reader in views}
    found |= {sig: f"{src} definer={d} reader={r} public={p}" for sig, src, d, r, p in functions}
    return found


def _legacy_view(url: str) -> None:
    """What an earlier kernelwatch left at revision 0001: its raw_samples view, in an older
    shape than today's file."""
    with psycopg.connect(url) as conn:
        conn.execute("CREATE VIEW raw_samples AS SELECT measurement_id, n FROM samples")


def test_a_fresh_database_and_one_upgraded_from_0001_have_the_views_of_the_files(pg_server):
    fresh = _database(pg_server, "t_views_fresh")
    migrate.upgrade(fresh)
    old = _database(pg_server, "t_views_old")
    migrate.upgrade(old, "0001")
    _legacy_view(old)
    migrate.upgrade(old)

    assert _objects(fresh) == _objects(old)
    views = {d.name for d in migrate.definitions() if d.kind == "view"}
    functions = {d.name for d in migrate.definitions() if d.kind == "function"}
    objects = _objects(fresh)
    assert {n for n in objects if "(" not in n} == views
    assert {n.split("(")[0] for n in objects if n.startswith("report_") and "(" in n} == functions
    assert all(v.endswith("reader=True") for n, v in objects.items() if n in views)
    for name, value in objects.items():
        if name.split("(")[0] in functions:  # the reader executes them, PUBLIC does not
            assert "definer=True reader=True public=False" in value, name
    with psycopg.connect(fresh) as conn:
        applied = dict(conn.execute("SELECT name, checksum FROM view_definitions"))
        assert applied == {d.name: d.checksum for d in migrate.definitions()}
        assert migrate.pending(conn) is None
        # each view is its file: made again from the file's text beside it, the same query
        for definition in migrate.definitions():
            if definition.kind != "view":
                continue
            temporary = definition.sql.replace("CREATE VIEW", "CREATE TEMP VIEW", 1)
            conn.execute(temporary)
            same = conn.execute(
                "SELECT pg_get_viewdef(to_regclass(%s)) = pg_get_viewdef(to_regclass(%s))",
                (f"pg_temp.{definition.name}", f"public.{definition.name}"),
            ).fetchone()[0]
            assert same, definition.name
            # a temporary view would shadow the stored one in the next comparisons
            conn.execute(f"DROP VIEW pg_temp.{definition.name}")
        conn.rollback()
        for definition in migrate.definitions():
            if definition.kind == "function":
                body = definition.sql.split("$fn$")[1]
                source = conn.execute(
                    "SELECT prosrc FROM pg_proc WHERE proname = %s", (definition.name,)
                ).fetchone()[0]
                assert source == body, definition.name


def test_a_changed_file_is_made_again_and_an_unchanged_store_is_left_alone(
    pg_server, tmp_path, monkeypatch
):
    url = _database(pg_server, "t_views_changed")
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        before = conn.execute("SELECT max(applied_at) FROM view_definitions").fetchone()[0]
    migrate.upgrade(url)  # nothing changed: nothing is dropped or recorded again
    with psycopg.connect(url) as conn:
        assert conn.execute("SELECT max(applied_at) FROM view_definitions").fetchone()[0] == before

    views = tmp_path / "views"
    shutil.copytree(migrate.VIEWS_DIR, views)
    path = views / "report_series_lengths.sql"
    path.write_text(path.read_text().replace(" AS points", " AS points, 1 AS marker", 1))
    monkeypatch.setattr(migrate, "VIEWS_DIR", views)
    migrate.definitions.cache_clear()
    try:
        with psycopg.connect(url) as conn:
            assert "views differ" in migrate.pending(conn)
        with pytest.raises(SchemaMismatch, match=r"views differ.*kernelwatch db upgrade"):
            connect(url)
        migrate.upgrade(url)
        with psycopg.connect(url) as conn:
            columns = conn.execute("SELECT * FROM report_series_lengths LIMIT 0").description
            assert [c.name for c in columns][-1] == "marker"
            assert migrate.pending(conn) is None
        connect(url).close()
    finally:
        migrate.definitions.cache_clear()


def test_db_status_says_when_the_views_differ_and_db_upgrade_makes_them_again(
    store_url, tmp_path, kernelwatch_cli
):
    """A configured database is never upgraded behind its owner's back: ``db status`` says
    the views differ, ``db upgrade`` makes them, and the command that needs them refuses
    until then (``connect``)."""
    with psycopg.connect(store_url) as conn:
        conn.execute("UPDATE view_definitions SET checksum = 'older' WHERE name = 'report_series'")
    env = {"KERNELWATCH_DATABASE_URL": store_url, "KERNELWATCH_SPOOL_DIR": str(tmp_path)}
    status = kernelwatch_cli("db", "status", cwd=tmp_path, env=env)
    assert status.returncode == 0, status.stderr
    assert f"schema: {migrate.HEAD} (head); the reporting views differ" in status.stdout
    upgrade = kernelwatch_cli("db", "upgrade", cwd=tmp_path, env=env)
    assert upgrade.returncode == 0, upgrade.stderr
    assert "reporting views made from this kernelwatch's definitions" in upgrade.stdout
    again = kernelwatch_cli("db", "status", cwd=tmp_path, env=env)
    assert f"schema: {migrate.HEAD} (head)\n" in again.stdout, again.stdout
    with psycopg.connect(store_url) as conn:
        assert migrate.pending(conn) is None


def test_a_view_kernelwatch_does_not_define_that_reads_one_stops_the_upgrade(pg_server):
    url = _database(pg_server, "t_views_foreign")
    migrate.upgrade(url, "0020")
    with psycopg.connect(url) as conn:
        conn.execute("CREATE VIEW report_series AS SELECT id AS series_id FROM series")
        conn.execute("CREATE VIEW my_panel AS SELECT * FROM report_series")
    with pytest.raises(migrate.ViewError, match=r"my_panel \(reads report_series\)"):
        migrate.upgrade(url)
    with psycopg.connect(url) as conn:  # the failed upgrade changed nothing
        assert migrate.current_revision(conn) == "0020"
        conn.execute("DROP VIEW my_panel")
    migrate.upgrade(url)
    with psycopg.connect(url) as conn:
        assert migrate.pending(conn) is None


def test_a_definition_must_name_its_file_and_views_must_not_read_in_a_circle(tmp_path, monkeypatch):
    monkeypatch.setattr(migrate, "VIEWS_DIR", tmp_path)
    (tmp_path / "report_a.sql").write_text("CREATE VIEW report_b AS SELECT 1 AS one;\n")
    migrate.definitions.cache_clear()
    try:
        with pytest.raises(migrate.ViewError, match=r"report_a\.sql: must create one view"):
            migrate.definitions()
        (tmp_path / "report_a.sql").write_text("CREATE VIEW report_a AS SELECT * FROM report_b;")
        (tmp_path / "report_b.sql").write_text(
            "-- reads report_c only in a comment\nCREATE VIEW report_b AS SELECT * FROM report_a;"
        )
        (tmp_path / "report_c.sql").write_text("CREATE VIEW report_c AS SELECT 1 AS one;")
        migrate.definitions.cache_clear()
        with pytest.raises(migrate.ViewError, match="circle: report_a -> report_b -> report_a"):
            migrate.definitions()
        (tmp_path / "report_a.sql").write_text("CREATE VIEW report_a AS SELECT 1 AS one;")
        migrate.definitions.cache_clear()
        ordered = migrate.definitions()
        assert [d.name for d in ordered] == ["report_a", "report_b", "report_c"]
        assert ordered[1].reads == {"report_a"}
    finally:
        migrate.definitions.cache_clear()


def test_migrations_hold_no_view_and_import_no_other_migration():
    for path in sorted(VERSIONS.glob("[0-9]*.py")):
        text = path.read_text()
        assert not VIEW_SQL.search(text), f"{path.name} defines a view or reporting function"
        assert "importlib" not in text and "migrations.versions" not in text, path.name
