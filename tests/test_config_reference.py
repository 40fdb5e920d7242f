"""docs/CONFIG.md is what scripts/config_reference.py prints from the records the loader
fills: every key of kernelwatch.toml, its default and meaning, declared once in code."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from kernelwatch.config.settings import parse

ROOT = Path(__file__).parent.parent


def test_the_committed_configuration_page_is_current():
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "config_reference.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    committed = (ROOT / "docs" / "CONFIG.md").read_text()
    assert committed == printed, (
        "docs/CONFIG.md is stale: run .venv/bin/python scripts/config_reference.py > docs/CONFIG.md"
    )


def test_the_pages_example_is_a_valid_configuration():
    page = (ROOT / "docs" / "CONFIG.md").read_text()
    (example,) = re.findall(r"```toml\n(.*?)```", page, re.S)
    config = parse(tomllib.loads(example), Path("CONFIG.md"))
    assert config.thresholds.for_kernel("flash_attention_fp8").verdict.margin == 0.05
    assert config.thresholds.for_kernel("flash_attention_fwd").verdict.margin == 0.02
    assert config.cost.of("gpu-h100").gpu_hour == 2.5
    assert config.cost.of("gpu-b200").gpu_hour is None
