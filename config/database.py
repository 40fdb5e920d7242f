"""Where the store lives: the database URL, the spool directory and the embedded server's
directory, read from the environment first, then from ``kernelwatch.toml``'s ``[database]``
table. Nothing here connects or starts anything."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

URL_ENV = "KERNELWATCH_DATABASE_URL"
SPOOL_ENV = "KERNELWATCH_SPOOL_DIR"
PG_DIR_ENV = "KERNELWATCH_PG_DIR"


@dataclass(frozen=True)
class DatabaseSettings:
    """The ``[database]`` table. Each key is overridden by its environment variable."""

    url: str | None = None
    """PostgreSQL URL of the store (``KERNELWATCH_DATABASE_URL``). Unset: the embedded
    server in ``embedded_dir``, started on first use."""
    spool_dir: str | None = None
    """Where runs wait while the database cannot be reached, for ``kernelwatch db replay``
    (``KERNELWATCH_SPOOL_DIR``). Unset: ``$XDG_DATA_HOME/kernelwatch/spool``."""
    embedded_dir: str | None = None
    """The embedded server's directory (``KERNELWATCH_PG_DIR``). Unset:
    ``$XDG_DATA_HOME/kernelwatch/pg``, or ``/var/lib/kernelwatch/pg`` for root."""


@dataclass(frozen=True)
class StoreConfig:
    """The store's settings. ``url`` None means: use the embedded server in ``pg_dir``."""

    url: str | None
    spool_dir: Path
    pg_dir: Path


def store_config(settings: DatabaseSettings) -> StoreConfig:
    """The store's settings: ``KERNELWATCH_DATABASE_URL``, ``KERNELWATCH_SPOOL_DIR`` and
    ``KERNELWATCH_PG_DIR`` over the file's ``[database] url / spool_dir / embedded_dir``."""
    url = os.environ.get(URL_ENV) or settings.url
    spool = os.environ.get(SPOOL_ENV) or settings.spool_dir
    pg_dir = os.environ.get(PG_DIR_ENV) or settings.embedded_dir
    return StoreConfig(
        url=url or None,
        spool_dir=Path(spool).expanduser() if spool else _data_home() / "spool",
        pg_dir=Path(pg_dir).expanduser() if pg_dir else _default_pg_dir(),
    )


def _default_pg_dir() -> Path:
    """The embedded server's directory: ``$XDG_DATA_HOME/kernelwatch/pg`` (by default
    ``~/.local/share/kernelwatch/pg``). For root it is ``/var/lib/kernelwatch/pg``: the server
    runs as an unprivileged user, which cannot reach into root's private home directory."""
    if os.geteuid() == 0:
        return Path("/var/lib/kernelwatch/pg")
    return _data_home() / "pg"


def _data_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kernelwatch"
