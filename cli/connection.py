"""Opening the results store from a command: the configured database or the embedded
server, with every way that can go wrong turned into a one-line error and an exit code.

psycopg and the store are imported when a command opens the store, not when the command line
starts: the GPU hosts run ``check``, ``bench`` and ``selfcheck`` without them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import fail
from kernelwatch.config.database import StoreConfig

if TYPE_CHECKING:
    import psycopg

    from kernelwatch.store.connect import Target


def store_config() -> StoreConfig:
    """The store configuration; a malformed config file exits 2."""
    return configuration().database


def store_target(config: StoreConfig | None = None) -> Target:
    """Where the store is (default: the configured one), starting the embedded server if
    that is the one in use; an unreachable database exits 1."""
    from kernelwatch.store.connect import StoreUnavailable, resolve

    try:
        return resolve(config or store_config())
    except StoreUnavailable as exc:
        fail(str(exc), code=1)


def open_store(config: StoreConfig | None = None) -> psycopg.Connection:
    """A connection to the store (default: the configured one) at this kernelwatch's
    schema; exits 1 when unreachable and 2 when the schema needs `kernelwatch db upgrade`."""
    from kernelwatch.store.connect import SchemaMismatch, StoreUnavailable, connect

    target = store_target(config)
    try:
        return connect(target.url)
    except StoreUnavailable as exc:
        fail(str(exc), code=1)
    except SchemaMismatch as exc:
        fail(str(exc), code=2)
