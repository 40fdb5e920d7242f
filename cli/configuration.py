"""``kernelwatch.toml`` from a command: read once, with a malformed file turned into one
line and exit 2."""

from __future__ import annotations

from kernelwatch.cli.console import fail
from kernelwatch.config.settings import Config, load
from kernelwatch.config.tables import ConfigError


def configuration() -> Config:
    """The configuration (``KERNELWATCH_CONFIG`` or ``./kernelwatch.toml``); exits 2 when the
    file is missing, unreadable or wrong."""
    try:
        return load()
    except ConfigError as exc:
        fail(str(exc), code=2)
