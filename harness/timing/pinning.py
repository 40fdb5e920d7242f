"""Pinned launch configs: a file mapping kernel and case to the config to launch.

Pinning freezes the autotuner's choice, so a run that times the same code at the same
config cannot show an "autotune flip" (a different config winning a noisy tuning race) as a
code regression. The file is JSON or TOML (by suffix)::

    {"gemm": {
        "*": {"meta": {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
              "num_warps": 8, "num_stages": 3},
        "m=16 n=4096 k=4096 b_layout=nk": {...},
        "m=16 n=4096 k=4096 b_layout=nk / bf16": {...}}}

A case key is the case's parameters as ``name=value`` words in any order (the ``case``
column of ``kernelwatch bench``), optionally followed by `` / DTYPE``. The most specific key
wins: case and dtype, then case, then ``*``. ``kernelwatch bench --save-pins`` writes such a
file from the configs a run used. Torch-free: the parent process loads and validates it.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kernelwatch.harness.records import CorrectnessResult, LaunchConfig, Measurement

#: kernel -> case key -> config, as read from a pin file.
Pins = Mapping[str, Mapping[str, LaunchConfig]]


class PinFileError(ValueError):
    """A pin file that cannot be read or does not follow the format."""


def load_pins(path: Path) -> dict[str, dict[str, LaunchConfig]]:
    """Read and validate a pin file; raises :class:`PinFileError` naming the file and key."""
    try:
        text = path.read_text()
        data = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (OSError, ValueError) as exc:
        raise PinFileError(f"cannot read pin file {str(path)!r}: {exc}") from exc
    return pins_from_json(data, str(path))


def pins_from_json(data: Any, source: str = "pins") -> dict[str, dict[str, LaunchConfig]]:
    """Validate the pin mapping (from a file, or from a plan crossing the process boundary)."""
    if not isinstance(data, Mapping):
        raise PinFileError(f"{source}: expected an object of kernel names")
    pins: dict[str, dict[str, LaunchConfig]] = {}
    for kernel, cases in data.items():
        if not isinstance(cases, Mapping):
            raise PinFileError(f"{source}: {kernel!r} must map case keys to configs")
        pins[kernel] = {}
        for key, config in cases.items():
            try:
                pins[kernel][key] = LaunchConfig.from_json(config)
            except (KeyError, TypeError, ValueError) as exc:
                raise PinFileError(
                    f"{source}: {kernel} / {key!r} is not a config "
                    f"(needs meta, num_warps, num_stages): {exc!r}"
                ) from exc
    return pins


def pins_to_json(pins: Pins) -> dict[str, dict[str, Any]]:
    """The JSON form of a pin mapping (what :func:`pins_from_json` reads)."""
    return {
        kernel: {key: _config_json(config) for key, config in cases.items()}
        for kernel, cases in pins.items()
    }


def _config_json(config: LaunchConfig) -> dict[str, Any]:
    return {
        "meta": dict(config.meta),
        "num_warps": config.num_warps,
        "num_stages": config.num_stages,
    }


def pinned_config(
    pins: Pins, kernel: str, params: Mapping[str, object], dtype: str
) -> LaunchConfig | None:
    """The pinned config for one case: case and dtype, then case, then ``*``; or None."""
    cases = pins.get(kernel)
    if not cases:
        return None
    words = _words(params)
    by_case = [(key, cfg) for key, cfg in cases.items() if key != "*"]
    for key, config in by_case:
        label, _, key_dtype = key.partition(" / ")
        if key_dtype.strip() == dtype and set(label.split()) == words:
            return config
    for key, config in by_case:
        if " / " not in key and set(key.split()) == words:
            return config
    return cases.get("*")


def _words(params: Mapping[str, object]) -> set[str]:
    return {f"{name}={value}" for name, value in params.items()}


def pins_from_records(
    records: Iterable[Measurement | CorrectnessResult],
) -> dict[str, dict[str, LaunchConfig]]:
    """A pin mapping holding the config of every measured or passed case, keyed by case and
    dtype: from a check's records, the configs it verified, for bench to time."""
    pins: dict[str, dict[str, LaunchConfig]] = {}
    for record in records:
        good = (
            record.verdict == "pass"
            if isinstance(record, CorrectnessResult)
            else record.status == "ok"
        )
        if record.config is not None and good:
            key = f"{record.case.label()} / {record.case.dtype}"
            pins.setdefault(record.case.kernel, {})[key] = record.config
    return pins
