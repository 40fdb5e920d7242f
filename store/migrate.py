"""Schema migrations, run from Python: no alembic.ini is needed. Alembic and SQLAlchemy are
imported only here, so ingest and queries start fast."""

from __future__ import annotations

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
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('kernelwatch.store.migrate'))"


def current_revision(conn: psycopg.Connection) -> str | None:
    """The schema revision of the connected database; None when it has never been migrated."""
    if conn.execute("SELECT to_regclass('alembic_version')").fetchone()[0] is None:
        return None
    row = conn.execute("SELECT version_num FROM alembic_version").fetchone()
    return row[0] if row else None


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` up to ``revision`` in one transaction. Concurrent
    callers queue on an advisory lock; the later ones find nothing left to do."""
    _run(url, "upgrade", revision)


def downgrade(url: str, revision: str) -> None:
    """Migrate the database at ``url`` down to ``revision`` (``base`` removes everything)."""
    _run(url, "downgrade", revision)


def script_head() -> str:
    """The head revision according to Alembic's script directory."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config(None)).get_current_head()


def _run(url: str, direction: str, revision: str) -> None:
    from alembic import command
    from sqlalchemy import create_engine, text

    engine = create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(url))
    try:
        with engine.begin() as connection:
            connection.execute(text(_LOCK))
            getattr(command, direction)(_config(connection), revision)
    finally:
        engine.dispose()


def _config(connection: object):  # noqa: ANN202 (alembic.config.Config, imported lazily)
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
    config.attributes["connection"] = connection
    return config
