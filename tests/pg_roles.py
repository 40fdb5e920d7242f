"""The store's roles on the tests' embedded server. Every connection to that server
authenticates (no trust: issue 29), so each role the tests log in as gets a password here,
set once per session by ``conftest.pg_server``; only the superuser's is the server's own."""

from __future__ import annotations

from urllib.parse import quote

import psycopg
import psycopg.sql

#: The roles the migrations create and the tests log in as.
ROLES = ("kernelwatch_reader", "kernelwatch_writer")
#: A test server's password for each of them: the server is the test session's, on a socket
#: only this user reaches.
PASSWORD = "tests-only-role-password"


def set_passwords(superuser_url: str) -> None:
    """Give every role of :data:`ROLES` the tests' password."""
    with psycopg.connect(superuser_url, autocommit=True) as conn:
        for role in ROLES:
            conn.execute(psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                psycopg.sql.Identifier(role), psycopg.sql.Literal(PASSWORD)))  # fmt: skip


def as_role(url: str, role: str) -> str:
    """``url`` (a database of the tests' server, as its superuser) as ``role``."""
    user, sep, rest = url.partition("://")[2].partition("@")
    assert sep and user == "postgres", url
    return f"postgresql://{role}:{quote(PASSWORD)}@{rest}"
