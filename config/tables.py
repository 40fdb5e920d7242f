"""The file's TOML tables turned into typed records: each value checked against the
dataclass field's type, and every error naming the file and the key."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

_T = TypeVar("_T")


class ConfigError(ValueError):
    """A configuration value that is missing, of the wrong type, or unreadable."""


def settable(cls: type, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The keys the file may set in a table read into ``cls``: ``allowed``, or every field."""
    return allowed or tuple(f.name for f in dataclasses.fields(cls) if f.init)


def values(
    cls: type,
    table: Mapping[str, Any],
    where: str,
    file: Path,
    allowed: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """``table``'s values for the fields of ``cls``, each checked against the field's type;
    an unknown key or a wrong type names the key."""
    hints = typing.get_type_hints(cls)
    names = settable(cls, allowed)
    out: dict[str, Any] = {}
    for key, value in table.items():
        if key not in names:
            raise ConfigError(f"{file}: {where}: unknown key {key!r}; known: {', '.join(names)}")
        out[key] = _coerce(value, hints[key], f"{where} {key}", file)
        _check_duration(key, out[key], f"{where} {key}", file)
    return out


def _check_duration(key: str, value: Any, where: str, file: Path) -> None:
    """Seconds (keys ending in ``_s``) are never negative; a timeout or a budget is more
    than zero (zero would stop every case, or never start one)."""
    if not key.endswith("_s") or not isinstance(value, int | float):
        return
    if value < 0 or (value == 0 and ("timeout" in key or "budget" in key)):
        least = "more than 0" if "timeout" in key or "budget" in key else "0 or more"
        raise ConfigError(f"{file}: {where} must be {least} seconds, not {value}")


def record(
    cls: type[_T],
    table: Mapping[str, Any],
    where: str,
    file: Path,
    allowed: tuple[str, ...] | None = None,
) -> _T:
    """An instance of the dataclass ``cls`` from ``table`` (see :func:`values`); a value the
    record rejects (its ``__post_init__`` raises ValueError) or a missing key is named."""
    given = values(cls, table, where, file, allowed)
    try:
        return cls(**given)
    except ValueError as exc:
        raise ConfigError(f"{file}: {where}: {exc}") from exc
    except TypeError as exc:
        missing = [
            f.name
            for f in dataclasses.fields(cls)  # type: ignore[arg-type]
            if f.name not in given
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        raise ConfigError(f"{file}: {where}: missing key {', '.join(missing)}") from exc


def table(data: Mapping[str, Any], key: str, file: Path, where: str = "") -> Mapping[str, Any]:
    """The sub-table ``key`` of ``data`` (empty when absent)."""
    found = data.get(key, {})
    if not isinstance(found, dict):
        raise ConfigError(f"{file}: {where or f'[{key}]'} must be a table")
    return found


def list_of_tables(value: Any, key: str, file: Path) -> list[Mapping[str, Any]]:
    """An array of tables (``[[key]]``)."""
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{file}: {key} must be an array of tables ([[{key}]])")
    return value


def _coerce(value: Any, hint: Any, where: str, file: Path) -> Any:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, where, file)
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{file}: {where} must be a list of strings")
        return tuple(value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{file}: {where} must be true or false")
        return value
    if hint in (int, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{file}: {where} must be a number")
        if hint is int and not isinstance(value, int):
            raise ConfigError(f"{file}: {where} must be an integer")
        if not math.isfinite(value):
            raise ConfigError(f"{file}: {where} must be a finite number, not {value}")
        return hint(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(f"{file}: {where} must be a string")
        return value
    raise ConfigError(f"{file}: {where} cannot be set from the file")
