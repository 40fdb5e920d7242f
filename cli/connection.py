"""Opening the results store from a command: the configured database or the embedded
server, with every way that can go wrong turned into a one-line error and an exit code."""

from __future__ import annotations

import psycopg

from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import fail
from kernelwatch.config.database import StoreConfig
from kernelwatch.store.connect import SchemaMismatch, StoreUnavailable, Target, connect, resolve


def store_config() -> StoreConfig:
    """The store configuration; a malformed config file exits 2."""
    return configuration().database


def store_target(config: StoreConfig | None = None) -> Target:
    """Where the store is (default: the configured one), starting the embedded server if
    that is the one in use; an unreachable database exits 1."""
    try:
        return resolve(config or store_config())
    except StoreUnavailable as exc:
        fail(str(exc), code=1)


def open_store(config: StoreConfig | None = None) -> psycopg.Connection:
    """A connection to the store (default: the configured one) at this kernelwatch's
    schema; exits 1 when unreachable and 2 when the schema needs `kernelwatch db upgrade`."""
    target = store_target(config)
    try:
        return connect(target.url)
    except StoreUnavailable as exc:
        fail(str(exc), code=1)
    except SchemaMismatch as exc:
        fail(str(exc), code=2)
