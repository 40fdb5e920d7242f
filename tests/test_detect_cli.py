"""``kernelwatch detect``: the real console script on JSON-lines files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from synthetic_series import make_series
from test_drift import SLOPE, nightly

from kernelwatch.analysis.thresholds import DetectorConfig


@pytest.fixture
def series_file(tmp_path):
    rng = np.random.default_rng(1)
    y = make_series(rng, 100, 0, jitter=0.005).y
    y[60:] *= 1.06
    flat = make_series(rng, 100, 0, jitter=0.005).y
    lines = [
        {"id": "gemm", "y": y.tolist(), "rev": [f"c{i}" for i in range(100)]},
        {"id": "flat", "y": flat.tolist(), "lower_is_better": True},
        {"id": "tiny", "y": [1.0, 1.1, 1.2]},
    ]
    path = tmp_path / "series.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_json_reports_each_series(kernelwatch_cli, series_file):
    result = kernelwatch_cli("detect", str(series_file), "--json")
    assert result.returncode == 0, result.stderr
    gemm, flat, tiny = (json.loads(line) for line in result.stdout.splitlines())
    [change] = gemm["change_points"]
    assert abs(change["index"] - 60) <= 2
    assert change["direction"] == "regression"
    assert change["magnitude_pct"] == pytest.approx(6, abs=1.5)
    assert change["p_value"] < DetectorConfig().alpha
    assert change["rev"] == f"c{change['index']}" and change["provisional"] is False
    assert flat["status"] == "ok" and flat["change_points"] == []
    assert tiny["status"] == "too_short" and tiny["change_points"] == []


def test_a_step_in_the_newest_points_is_reported_provisional_at_once(kernelwatch_cli, tmp_path):
    y = make_series(np.random.default_rng(2), 52, 0, jitter=0.01).y
    y[50:] *= 1.1  # 10x the noise, two points ago
    path = tmp_path / "fresh.jsonl"
    path.write_text(json.dumps({"id": "fresh", "y": y.tolist()}) + "\n")
    result = kernelwatch_cli("detect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    [change] = json.loads(result.stdout)["change_points"]
    assert change["index"] == 50 and change["direction"] == "regression"
    assert change["provisional"] is True
    table = kernelwatch_cli("detect", str(path))
    assert "provisional" in table.stdout


def test_a_drift_is_one_change_named_a_drift_with_its_slope_and_end(kernelwatch_cli, tmp_path):
    path = tmp_path / "drift.jsonl"
    path.write_text(json.dumps({"id": "leak", "y": nightly(0).tolist()}) + "\n")
    result = kernelwatch_cli("detect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    [change] = json.loads(result.stdout)["change_points"]
    drift = change["drift"]
    assert change["index"] == drift["start"] + 1 and change["direction"] == "regression"
    assert abs(drift["slope_pct"] - 100 * SLOPE) <= 0.2 and drift["ongoing"] is False
    assert change["magnitude_pct"] == pytest.approx(drift["total_pct"], abs=1e-3)
    table = kernelwatch_cli("detect", str(path))
    assert f"%/point until {drift['end']}" in table.stdout, table.stdout


def test_table_and_fail_on_regression(kernelwatch_cli, series_file):
    result = kernelwatch_cli("detect", str(series_file), "--fail-on-regression")
    assert result.returncode == 1
    assert "regression at" in result.stdout
    assert "[/" not in result.stdout  # styled, not raw markup
    assert "too short" in result.stdout
    assert "1 regressions" in result.stderr


def test_thresholds_come_from_the_file_and_a_line_may_name_its_kernel(
    kernelwatch_cli, series_file, tmp_path, monkeypatch
):
    gemm, _, tiny = (json.loads(line) for line in series_file.read_text().splitlines())
    lines = [gemm, {**gemm, "id": "attention", "kernel": "flash_attention_fwd"}, tiny]
    series = tmp_path / "kernels.jsonl"
    series.write_text("".join(json.dumps(line) + "\n" for line in lines))
    config = tmp_path / "kernelwatch.toml"
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))

    def changes(text: str) -> dict[str, int]:
        config.write_text(text)
        result = kernelwatch_cli("detect", str(series), "--json")
        assert result.returncode == 0, result.stderr
        found = [json.loads(line) for line in result.stdout.splitlines()]
        # The scan's verdicts: alpha is the scan's (a provisional tail change reported on an
        # earlier night stays reported while the level since it differs, whatever alpha).
        settled = {f["id"]: [c for c in f["change_points"] if not c["provisional"]] for f in found}
        return {name: len(points) for name, points in settled.items()} | {
            f"{f['id']} needs": f["needs"] for f in found if "needs" in f
        }

    # A 6% step over 40 and 60 points is far past p = 1e-5, but not p = 1e-15.
    assert changes("[detection]\nalpha = 1e-15\nmin_size = 4\n") == {
        "gemm": 0, "attention": 0, "tiny": 0, "tiny needs": 8,
    }  # fmt: skip
    own = '[[thresholds]]\nkernels = ["flash_attention*"]\ndetection.alpha = 1e-15\n'
    needs = 2 * DetectorConfig().min_size
    assert changes(own) == {"gemm": 1, "attention": 0, "tiny": 0, "tiny needs": needs}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": 1, "y": [1, 2, 3]}\nnot json\n', "line 2: not JSON"),
        ('{"id": 1, "t": [1]}\n', "line 1: missing 'y'"),
        ('{"id": 1, "y": [1.0, "fast"]}\n', 'line 1: y[1] is "fast"'),
        ('{"id": 1, "y": []}\n', "line 1: 'y' must be a non-empty list"),
        ('{"id": 1, "y": [1.0, 2.0], "rev": ["a"]}\n', "line 1: 'rev' must be a list as long"),
        ("\n", "holds no series"),
        ('{"id": 1, "y": [1.0], "kernel": 3}\n', "line 1: 'kernel' must be a string"),
    ],
)
def test_bad_input_exits_2_with_one_line(kernelwatch_cli, tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    result = kernelwatch_cli("detect", str(path))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
