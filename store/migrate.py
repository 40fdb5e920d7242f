"""Schema migrations, run from Python: no alembic.ini is needed. Alembic and SQLAlchemy are
imported only here, so ingest and queries start fast.

Tables, indexes, roles and data change in ordered migrations (``migrations/versions``). The
reporting views and functions (what Grafana, the report and the CLI read) hold no state: each
has one current definition, a file in ``views/``, as Flyway's repeatable migrations and
Alembic's replaceable objects keep them. ``upgrade`` to head drops them all before the table
migrations run (so a table change never fights a view), then creates them from the files in
dependency order, grants the reader role each one, and records each file's checksum in
``view_definitions``; it does nothing when the schema is at head and every checksum matches.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

# The newest revision in migrations/versions, read from the numbered file names (a test checks
# it against Alembic's head), so connecting can check the schema without importing Alembic.
HEAD = max(
    path.name.split("_", 1)[0]
    for path in (Path(__file__).parent / "migrations" / "versions").glob(
        "[0-9][0-9][0-9][0-9]_*.py"
    )
)
VIEWS_DIR = Path(__file__).parent / "views"
READER = "kernelwatch_reader"
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('kernelwatch.store.migrate'))"
_CREATE = re.compile(r"^CREATE (VIEW|FUNCTION) (\w+)(\([^)]*\))?", re.MULTILINE)


class ViewError(RuntimeError):
    """A definition in ``views/`` that cannot be applied as it is."""


@dataclass(frozen=True)
class Definition:
    """One view or function as its file defines it."""

    name: str
    kind: str  # "view" or "function"
    signature: str  # what DROP and GRANT name: the view's name, the function's with its arguments
    sql: str
    checksum: str
    reads: frozenset[str]  # the other definitions its SQL names


def current_revision(conn: psycopg.Connection) -> str | None:
    """The schema revision of the connected database; None when it has never been migrated."""
    if conn.execute("SELECT to_regclass('alembic_version')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return row[0] if row else None


def pending(conn: psycopg.Connection) -> str | None:
    """What ``upgrade`` would change in the connected database, in a few words; None when its
    schema is at this kernelwatch's head and its views are the files'."""
    current = current_revision(conn)
    if current != HEAD:
        return (
            f"the database schema is at revision {current or 'none'}, this kernelwatch needs {HEAD}"
        )
    if _applied(conn) != {d.name: d.checksum for d in definitions()}:
        return "the reporting views differ from this kernelwatch's definitions"
    return None


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` in one transaction, the views made
    again from their files when that is the head (only the head has view definitions).
    Concurrent callers queue on an advisory lock; the later ones find nothing left to do."""
    to_head = revision in ("head", HEAD)
    with _migrating(url) as (conn, command, config):
        if to_head and pending(conn) is None:
            return
        _drop_views(conn)
        command.upgrade(config, revision)
        if to_head:
            _create_views(conn)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``base`` removes everything).
    The views are dropped and stay so: ``upgrade`` to head makes them again."""
    with _migrating(url) as (conn, command, config):
        _drop_views(conn)
        command.downgrade(config, revision)


def script_head() -> str:
    """The head revision according to Alembic's script directory."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(None)).get_current_head()


@functools.cache
def definitions() -> tuple[Definition, ...]:
    """Every file of ``views/``, in an order that creates each after what it reads."""
    found: dict[str, tuple[str, str, str]] = {}
    for path in sorted(VIEWS_DIR.glob("*.sql")):
        sql = path.read_text()
        match = _CREATE.search(sql)
        if match is None or match[2] != path.stem:
            raise ViewError(f"{path.name}: must create one view or function named {path.stem}")
        found[path.stem] = (match[1].lower(), match[2] + (match[3] or ""), sql)
    code = {name: re.sub(r"--[^\n]*", "", sql) for name, (_, _, sql) in found.items()}
    ordered: list[Definition] = []
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        if name in done:
            return
        if name in path:
            raise ViewError(f"views read each other in a circle: {' -> '.join((*path, name))}")
        reads = frozenset(o for o in found if o != name and re.search(rf"\b{o}\b", code[name]))
        for other in sorted(reads):
            visit(other, (*path, name))
        kind, signature, sql = found[name]
        checksum = hashlib.sha256(sql.encode()).hexdigest()
        ordered.append(Definition(name, kind, signature, sql, checksum, reads))
        done.add(name)

    for name in found:
        visit(name, ())
    return tuple(ordered)


def _applied(conn: psycopg.Connection) -> dict[str, str]:
    if conn.execute("SELECT to_regclass('view_definitions')").fetchone()[0] is None:
        return {}
    return dict(conn.execute("SELECT name, checksum FROM view_definitions").fetchall())


def _drop_views(conn: psycopg.Connection) -> None:
    """Drop every view and function kernelwatch defines now or recorded as applied before;
    refuse, saying which, when a view kernelwatch does not define reads one of them."""
    views = {d.name for d in definitions() if d.kind == "view"}
    functions = {d.signature for d in definitions() if d.kind == "function"}
    if conn.execute("SELECT to_regclass('view_definitions')").fetchone()[0] is not None:
        for kind, signature in conn.execute("SELECT kind, signature FROM view_definitions"):
            (views if kind == "view" else functions).add(signature)
    foreign = conn.execute(
        """SELECT DISTINCT dependent.relname, source.relname
        FROM pg_depend d
            JOIN pg_rewrite r ON r.oid = d.objid
            JOIN pg_class dependent ON dependent.oid = r.ev_class
            JOIN pg_class source ON source.oid = d.refobjid
        WHERE source.relname = ANY(%(ours)s) AND NOT dependent.relname = ANY(%(ours)s)
            AND dependent.relnamespace = to_regnamespace(current_schema())
        ORDER BY 1""",
        {"ours": sorted(views)},
    ).fetchall()
    if foreign:
        named = ", ".join(f"{dependent} (reads {source})" for dependent, source in foreign)
        raise ViewError(
            f"views kernelwatch does not define read its views: {named}; drop them, upgrade, "
            "and create them again"
        )
    for signature in sorted(functions):
        conn.execute(f"DROP FUNCTION IF EXISTS {signature}")
    if views:
        conn.execute(f"DROP VIEW IF EXISTS {', '.join(sorted(views))} CASCADE")


def _create_views(conn: psycopg.Connection) -> None:
    conn.execute("DELETE FROM view_definitions")
    for position, definition in enumerate(definitions()):
        conn.execute(definition.sql)
        if definition.kind == "view":
            conn.execute(f"GRANT SELECT ON {definition.name} TO {READER}")
        else:
            conn.execute(f"REVOKE EXECUTE ON FUNCTION {definition.signature} FROM PUBLIC")
            conn.execute(f"GRANT EXECUTE ON FUNCTION {definition.signature} TO {READER}")
        conn.execute(
            "INSERT INTO view_definitions (name, kind, signature, position, checksum) "
            "VALUES (%s, %s, %s, %s, %s)",
            (definition.name, definition.kind, definition.signature, position,
             definition.checksum),
        )  # fmt: skip


@contextmanager
def _migrating(url: str) -> Iterator[tuple[psycopg.Connection, object, object]]:
    """One transaction holding the migration lock: the psycopg connection under it, Alembic's
    ``command`` module and a config on that connection."""
    from alembic import command
    from sqlalchemy import create_engine, text

    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url))
    try:
        with engine.begin() as connection:
            connection.execute(text(_LOCK))
            yield connection.connection.driver_connection, command, _config(connection)
    finally:
        engine.dispose()


def _config(connection: object):  # noqa: ANN202 (alembic.config.Config, imported lazily)
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    return config
