"""Finding and opening the database: the configured URL, or the embedded server (started
and migrated on first use)."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from kernelwatch.config.database import StoreConfig
from kernelwatch.config.redact import redact
from kernelwatch.config.settings import load
from kernelwatch.store import migrate
from kernelwatch.store.embedded import EmbeddedError, EmbeddedServer, ServerState


class StoreUnavailable(RuntimeError):
    """The database cannot be reached (or the embedded server cannot be started)."""


class UnparsableURL(StoreUnavailable):
    """The database URL cannot be parsed: a mistake in the configuration, which no retry
    cures (the flows' tasks retry other StoreUnavailable errors, 20 s apart)."""


class SchemaMismatch(RuntimeError):
    """The database's schema is not the one this kernelwatch was written for."""


@dataclass(frozen=True)
class Target:
    """Where the store is: ``url``, and for the embedded server its state on resolution."""

    url: str
    embedded: EmbeddedServer | None = None
    state: ServerState | None = None


def resolve(config: StoreConfig | None = None) -> Target:
    """The configured database, or the embedded server, started if needed and migrated to
    this kernelwatch's schema (it is kernelwatch's own database, so upgrading it is safe)."""
    config = config or load().database
    if config.url:
        return Target(config.url)
    server = EmbeddedServer(config.pg_dir)
    try:
        state = server.ensure_running()
    except EmbeddedError as exc:
        raise StoreUnavailable(str(exc)) from exc
    url = server.url()
    with open_connection(url) as conn:
        behind = migrate.pending(conn)
    if behind is not None:
        migrate.upgrade(url)
    return Target(url, server, state)


def connect(url: str) -> psycopg.Connection:
    """Open a connection and check the schema is at this kernelwatch's revision, with its
    reporting views."""
    conn = open_connection(url)
    behind = migrate.pending(conn)
    conn.rollback()
    if behind is not None:
        conn.close()
        raise SchemaMismatch(f"{behind}: run `kernelwatch db upgrade`")
    return conn


def redacted(url: str) -> str:
    """``url`` with any password replaced by ``***``, for messages and status output; one
    libpq cannot parse keeps no user info, query or anything unreadable."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return redact(url)
    for key in ("password", "sslpassword"):
        if key in info:
            info[key] = "***"
    return psycopg.conninfo.make_conninfo(**info)


def open_connection(url: str) -> psycopg.Connection:
    """A connection to ``url``, whatever its schema; StoreUnavailable (its message free of
    secrets) when it cannot be parsed or reached."""
    try:
        return psycopg.connect(url, connect_timeout=10)
    except psycopg.ProgrammingError:
        # libpq's parse error quotes the token it choked on, which is often the password.
        raise UnparsableURL(
            f"cannot parse the database URL {redacted(url)}: percent-encode the password's "
            "special characters (% as %25, @ as %40) and bracket an IPv6 host ([::1])"
        ) from None
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreUnavailable(f"cannot connect to {redacted(url)}: {first}") from exc
