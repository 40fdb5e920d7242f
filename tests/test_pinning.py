"""Pin files: formats, precedence, errors, and writing one from a run's records."""

from __future__ import annotations

import json

import pytest

from kernelwatch.harness.records import LaunchConfig
from kernelwatch.harness.timing.pinning import (
    PinFileError,
    load_pins,
    pinned_config,
    pins_from_json,
    pins_to_json,
)

_CFG = {"meta": {"BLOCK_M": 64}, "num_warps": 4, "num_stages": 3}


def test_most_specific_key_wins(tmp_path):
    path = tmp_path / "pins.json"
    path.write_text(
        json.dumps(
            {
                "gemm": {
                    "*": _CFG,
                    "n=40 m=1": {**_CFG, "num_warps": 8},
                    "m=1 n=40 / fp16": {**_CFG, "num_stages": 5},
                }
            }
        )
    )
    pins = load_pins(path)
    assert pinned_config(pins, "gemm", {"m": 1, "n": 40}, "fp16").num_stages == 5
    assert pinned_config(pins, "gemm", {"m": 1, "n": 40}, "fp32").num_warps == 8
    assert pinned_config(pins, "gemm", {"m": 2, "n": 40}, "fp32") == LaunchConfig(
        {"BLOCK_M": 64}, 4, 3
    )
    assert pinned_config(pins, "softmax", {"m": 1}, "fp32") is None
    assert pins_from_json(pins_to_json(pins)) == pins


def test_toml_pin_file(tmp_path):
    path = tmp_path / "pins.toml"
    path.write_text('[gemm."*"]\nnum_warps = 8\nnum_stages = 3\nmeta = { BLOCK_M = 128 }\n')
    assert load_pins(path)["gemm"]["*"] == LaunchConfig({"BLOCK_M": 128}, 8, 3)


def test_bad_pin_files_name_the_problem(tmp_path):
    with pytest.raises(PinFileError, match="cannot read pin file"):
        load_pins(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"gemm": {"*": {"num_warps": 4}}}))
    with pytest.raises(PinFileError, match=r"gemm / '\*' is not a config"):
        load_pins(bad)
