"""The evaluation tables in docs/ are what scripts/docs_results.py renders from the results
JSON the evaluation scripts committed (docs/results/); the evaluations are not re-run."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).parent.parent


def _renderer():
    spec = importlib.util.spec_from_file_location(
        "docs_results", ROOT / "scripts" / "docs_results.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_docs_tables_match_their_committed_results():
    renderer = _renderer()
    assert renderer.stale_blocks() == [], "run .venv/bin/python scripts/docs_results.py --write"
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("*.md"))
    used = {m["table"] for m in renderer.BLOCK.finditer(pages)}
    assert used == set(renderer.RENDERERS)


def test_a_table_that_differs_from_its_results_is_stale(tmp_path):
    renderer = _renderer()
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    results = tmp_path / "docs" / "results" / "detection.json"
    details = json.loads(results.read_text())
    details["rows"][0]["scores"]["f1"] += 0.001
    results.write_text(json.dumps(details))
    assert renderer.stale_blocks(tmp_path) == ["docs/BENCHMARKS.md", "docs/DETECTION.md"]
