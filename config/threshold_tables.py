"""The decision thresholds of ``kernelwatch.toml``: the defaults in ``[detection]``,
``[verdict]``, ``[bisect]`` (its ``bad_fraction``), ``[static]`` and ``[confirm]`` (its
suspicion keys), and the per-kernel
overrides in ``[[thresholds]]`` blocks, read into ``analysis.thresholds.Thresholds``."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernelwatch.analysis.thresholds import SECTIONS, KernelOverride, Thresholds
from kernelwatch.config.tables import ConfigError, list_of_tables, record, table, values

#: Fields that describe the values rather than judge them (times or rates): a property of
#: each series or sample, never of the file.
_NOT_SETTABLE = ("lower_is_better",)

#: The keys the file may set, per section.
KEYS: dict[str, tuple[str, ...]] = {
    name: tuple(f.name for f in dataclasses.fields(cls) if f.name not in _NOT_SETTABLE)
    for name, cls in SECTIONS.items()
}


def parse_thresholds(
    sections: Mapping[str, Mapping[str, Any]], blocks: Any, file: Path
) -> Thresholds:
    """The thresholds from the default tables (``sections``: section name -> its table, the
    ``[bisect]`` and ``[confirm]`` ones holding only their threshold keys) and the
    ``[[thresholds]]`` array."""
    defaults = {
        name: record(cls, sections.get(name, {}), f"[{name}]", file, KEYS[name])
        for name, cls in SECTIONS.items()
    }
    overrides = []
    for index, block in enumerate(list_of_tables(blocks, "thresholds", file), start=1):
        where = f"[[thresholds]] #{index}"
        override = _override(block, where, file)
        try:
            Thresholds(**defaults, overrides=(override,))
        except ValueError as exc:
            raise ConfigError(f"{file}: {where}: {exc}") from exc
        overrides.append(override)
    return Thresholds(**defaults, overrides=tuple(overrides))


def _override(block: Mapping[str, Any], where: str, file: Path) -> KernelOverride:
    known = ("kernels", *SECTIONS)
    for key in block:
        if key not in known:
            raise ConfigError(f"{file}: {where}: unknown key {key!r}; known: {', '.join(known)}")
    kernels = block.get("kernels")
    if (
        not isinstance(kernels, list)
        or not kernels
        or not all(isinstance(k, str) and k for k in kernels)
    ):
        raise ConfigError(
            f"{file}: {where} kernels must be a non-empty list of kernel name patterns, "
            'e.g. kernels = ["flash_attention*"]'
        )
    given = {}
    for name, cls in SECTIONS.items():
        if name in block:
            label = f"{where} {name}"
            given[name] = values(cls, table(block, name, file, label), label, file, KEYS[name])
    return KernelOverride(tuple(kernels), given)
