"""Where the store lives: the database URL, the spool directory and the embedded server's
directory, read from the environment first, then from ``kernelwatch.toml``'s ``[database]``
table. Nothing here connects or starts anything."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

CONFIG_ENV = "KERNELWATCH_CONFIG"
URL_ENV = "KERNELWATCH_DATABASE_URL"
SPOOL_ENV = "KERNELWATCH_SPOOL_DIR"
PG_DIR_ENV = "KERNELWATCH_PG_DIR"
CONFIG_FILE = "kernelwatch.toml"


class ConfigError(ValueError):
    """A configuration value that is missing, of the wrong type, or unreadable."""


@dataclass(frozen=True)
class StoreConfig:
    """The store's settings. ``url`` None means: use the embedded server in ``pg_dir``."""

    url: str | None
    spool_dir: Path
    pg_dir: Path


def load_config(cwd: Path | None = None) -> StoreConfig:
    """Read the settings: ``KERNELWATCH_DATABASE_URL``, ``KERNELWATCH_SPOOL_DIR`` and
    ``KERNELWATCH_PG_DIR`` override ``[database] url / spool_dir / embedded_dir`` of the file
    named by ``KERNELWATCH_CONFIG`` (default ``./kernelwatch.toml``, if present)."""
    table = _database_table(cwd or Path.cwd())
    url = os.environ.get(URL_ENV) or table.get("url")
    spool = os.environ.get(SPOOL_ENV) or table.get("spool_dir")
    pg_dir = os.environ.get(PG_DIR_ENV) or table.get("embedded_dir")
    return StoreConfig(
        url=url or None,
        spool_dir=Path(spool).expanduser() if spool else _data_home() / "spool",
        pg_dir=Path(pg_dir).expanduser() if pg_dir else default_pg_dir(),
    )


def default_pg_dir() -> Path:
    """The embedded server's directory: ``$XDG_DATA_HOME/kernelwatch/pg`` (by default
    ``~/.local/share/kernelwatch/pg``). For root it is ``/var/lib/kernelwatch/pg``: the server
    runs as an unprivileged user, which cannot reach into root's private home directory."""
    if os.geteuid() == 0:
        return Path("/var/lib/kernelwatch/pg")
    return _data_home() / "pg"


def _data_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kernelwatch"


def _database_table(cwd: Path) -> dict[str, str]:
    explicit = os.environ.get(CONFIG_ENV)
    path = Path(explicit) if explicit else cwd / CONFIG_FILE
    if not path.is_file():
        if explicit:
            raise ConfigError(f"{CONFIG_ENV}={explicit} does not name a readable file")
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML: {exc}") from exc
    table = data.get("database", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [database] must be a table")
    for key in ("url", "spool_dir", "embedded_dir"):
        if key in table and not isinstance(table[key], str):
            raise ConfigError(f"{path}: [database] {key} must be a string")
    return table
