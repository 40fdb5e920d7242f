"""Malformed input gets one clear line and exit 2, never a traceback; text from the store,
kernels or users is printed as text, never as Rich markup (issue 17, findings 10-11)."""

from __future__ import annotations

import json
import re

import psycopg
import pytest

from kernelwatch.config.settings import parse
from kernelwatch.config.tables import ConfigError

#: The styles the command line colours verdicts with, as they would read if printed as text.
STYLE_TAGS = re.compile(r"\[/?(bold red|green|yellow|red|dim)\]")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"database": {"urll": "postgresql://x@/y"}}, "unknown key 'urll'"),
        ({"run": {"case_timeout_s": float("nan")}}, "finite number"),
        ({"run": {"case_timeout_s": -5.0}}, "more than 0 seconds"),
        ({"bench": {"budget_s": -1.0}}, "more than 0 seconds"),
        ({"bench": {"budget_s": float("inf")}}, "finite number"),
        ({"bisect": {"budget_s": 0.0}}, "more than 0 seconds"),
        ({"bench": {"warmup_s": -0.1}}, "0 or more seconds"),
        ({"pools": {"a": {"cron": "not a cron"}}}, "not a cron expression"),
        ({"pools": {"a": {"cron": "61 3 * * *"}}}, "not a cron expression"),
        ({"pools": {"a": {"timezone": "Mars/Olympus"}}}, "not a known time zone"),
    ],
)
def test_config_nonsense_is_refused_naming_the_key(tmp_path, data, message):
    with pytest.raises(ConfigError, match=message):
        parse(data, tmp_path / "kernelwatch.toml")


def _one_line_exit_2(proc) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr


def test_timeout_inf_is_bad_input_not_a_traceback(kernelwatch_cli):
    _one_line_exit_2(kernelwatch_cli("check", "-k", "rms_norm", "--timeout", "inf"))
    _one_line_exit_2(kernelwatch_cli("bench", "-k", "rms_norm", "--budget", "-1"))


@pytest.mark.parametrize(
    "content",
    [
        b'{"id": "x", "y": [' + b"9" * 400 + b", 1, 1]}\n",
        b"[" * 100_000 + b"]" * 100_000 + b"\n",
        b'{"id": "\xff", "y": [1, 2]}\n',
    ],
    ids=["400-digit number", "deep nesting", "invalid UTF-8"],
)
def test_detect_malformed_series_file_is_one_line_exit_2(kernelwatch_cli, tmp_path, content):
    path = tmp_path / "series.jsonl"
    path.write_bytes(content)
    proc = kernelwatch_cli("detect", str(path))
    _one_line_exit_2(proc)
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


def test_detect_series_id_is_printed_as_text_not_markup(kernelwatch_cli, tmp_path):
    path = tmp_path / "series.jsonl"
    level = [1.0, 1.01, 1.02] * 7
    path.write_text(json.dumps({"id": "[/red][bold]x", "y": level + [y + 1 for y in level]}))
    proc = kernelwatch_cli("detect", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "[/red][bold]x" in proc.stdout and "regression at 21" in proc.stdout
    assert not STYLE_TAGS.search(proc.stdout.replace("[/red][bold]x", ""))


def test_regression_assignee_markup_does_not_break_regressions_list(
    kernelwatch_cli, store_url, monkeypatch, tmp_path
):
    with psycopg.connect(store_url) as conn:
        repo = conn.execute("INSERT INTO repositories (name) VALUES ('[red]r') RETURNING id")
        conn.execute(
            "INSERT INTO regressions (repository_id, title, assignee) VALUES (%s, %s, %s)",
            (repo.fetchone()[0], "[bold]title[/i]", "[/red]"),
        )
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(tmp_path / "none.toml"))
    (tmp_path / "none.toml").write_text("")
    proc = kernelwatch_cli("regressions", "list")
    assert proc.returncode == 0, proc.stderr
    assert "[/red]" in proc.stdout and "[bold]title[/i]" in proc.stdout


def test_unknown_repository_and_regression_are_bad_input(
    kernelwatch_cli, store_url, monkeypatch, tmp_path
):
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    config = tmp_path / "kernelwatch.toml"
    config.write_text(f'[[repositories]]\nname = "demo"\nsource = "{tmp_path}"\nsuite = "s.py"\n')
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    proc = kernelwatch_cli("regressions", "update", "--repository", "nosuch")
    _one_line_exit_2(proc)
    assert "no repository 'nosuch'" in proc.stderr
    proc = kernelwatch_cli("bisect", "--regression", "99999")
    _one_line_exit_2(proc)
    assert "no regression #99999" in proc.stderr


MARKUP_SUITE = """
import torch
from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite

def launch(t, o, p, cfg):
    raise RuntimeError("[/red] closes nothing [bold]")

def inputs(p, dtype, dev, gen):
    return {"x": torch.randn(4, generator=gen, device=dev).to(dtype)}

SUITE = Suite(name="markup", kernels=(KernelSpec(
    name="k", summary="[/i]", launch=launch,
    make_inputs=inputs,
    make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
    reference=lambda t, p: {"y": t["x"]},
    baseline=Baseline("copy", lambda t, p: {"y": t["x"].clone()}),
    workloads={"smoke": ({"n": 4},)}, flops=lambda p: 4, min_bytes=lambda p, e: 8 * e,
    dtypes=("fp32",),
),))
"""


@pytest.mark.parametrize("command", ["check", "bench"])
def test_kernel_error_text_is_printed_as_text_not_markup(kernelwatch_cli, tmp_path, command):
    (tmp_path / "markup_suite.py").write_text(MARKUP_SUITE)
    proc = kernelwatch_cli(command, "--suite", str(tmp_path / "markup_suite.py"))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "[/red] closes nothing [bold]" in proc.stdout + proc.stderr
    # The verdict keeps its colour without its markup showing.
    assert not STYLE_TAGS.search(proc.stdout.replace("[/red] closes nothing [bold]", ""))


HOSTILE_TEXT = (
    "boom\x1b[2J\x1b]0;pwned\x07\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x9b31m\x08!"
)


def test_terminal_escapes_a_kernel_wrote_never_reach_the_terminal():
    """A kernel's error or parameter reaches the check table and one-line errors: escape
    sequences (clear screen, retitle, OSC 8 link, a C1 CSI) are dropped, the text kept."""
    import io

    from kernelwatch.cli.console import TextConsole, TextTable
    from kernelwatch.config.redact import printable

    assert printable(HOSTILE_TEXT) == "boomclick!"
    assert printable("tab\tand\nnewline stay, é too") == "tab\tand\nnewline stay, é too"
    out = io.StringIO()
    console = TextConsole(file=out, width=120, force_terminal=True)
    table = TextTable(title="correctness")
    table.add_column("reason")
    table.add_row(HOSTILE_TEXT)
    console.print(table)
    console.print(f"error: {HOSTILE_TEXT}", highlight=False)
    text = out.getvalue()
    assert "pwned" not in text and "evil.example" not in text and "\x9b" not in text
    assert "\x1b[2J" not in text and "\x1b]" not in text and "\x08" not in text
    assert text.count("boomclick!") == 2
