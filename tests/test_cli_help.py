"""Every command's ``--help`` prints its help texts as written: square-bracketed text such as
kernelwatch.toml's ``[detection]`` and ``[[thresholds]]`` is shown, never read as Rich
markup and dropped."""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Iterator

import pytest
from typer.main import get_command, get_command_name, solve_typer_info_help
from typer.models import ParameterInfo, TyperInfo
from typer.testing import CliRunner
from typer.utils import get_params_from_function

from kernelwatch.cli.main import app

BRACKETED = re.compile(r"\[+[^\[\]]*\]+")


def _written(
    group: TyperInfo, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Each command path under ``group`` (itself included) with its help texts as the source
    writes them: the command's own and its parameters'."""
    typer_app = group.typer_instance
    root = typer_app.registered_callback
    yield path, [solve_typer_info_help(group), *_parameter_help(root and root.callback)]
    for info in typer_app.registered_commands:
        name = info.name or get_command_name(info.callback.__name__)
        own = info.help or inspect.getdoc(info.callback) or ""
        yield (*path, name), [own, *_parameter_help(info.callback)]
    for sub in typer_app.registered_groups:
        yield from _written(sub, (*path, sub.name or sub.typer_instance.info.name))


def _parameter_help(callback: object) -> list[str]:
    if callback is None:
        return []
    return [
        meta.default.help or ""
        for meta in get_params_from_function(callback).values()
        if isinstance(meta.default, ParameterInfo)
    ]


def _paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _paths(sub, (*path, name))


def _flat(text: str) -> str:
    """The help as one line: panel borders and the wrapping between lines taken out."""
    return " ".join(" ".join(line.strip(" │╭╮╰╯─").split()) for line in text.splitlines())


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return _flat(result.output)


WRITTEN = dict(_written(TyperInfo(app)))


def test_every_command_is_checked():
    assert set(WRITTEN) == set(_paths(get_command(app)))


@pytest.mark.parametrize("path", sorted(WRITTEN), ids=lambda path: " ".join(path) or "kernelwatch")
def test_help_prints_bracketed_text_literally(path):
    shown = _help(path)
    missing = [
        token
        for text in WRITTEN[path]
        for token in BRACKETED.findall(text)
        if " ".join(token.split()) not in shown
    ]
    assert missing == []


def test_regressions_update_names_its_toml_tables():
    assert "The thresholds are kernelwatch.toml's ([detection], per-kernel [[thresholds]])." in (
        _help(("regressions", "update"))
    )


def _premature_breaks(output: str) -> list[str]:
    """Rows of a help panel that end where the next row's first word would still have fit:
    a line break kept from the source text, not Rich wrapping at the panel's width."""
    found = []
    lines = output.splitlines()
    for previous, line in itertools.pairwise(lines):
        if previous.strip() and line.startswith(" ") and previous.startswith(" "):
            # The command's own paragraphs, above the panels, wrap at the full width.
            first = line.split()[0] if line.strip() else ""
            if first and len(previous.rstrip()) + 1 + len(first) <= len(line) - 1:
                found.append(f"{previous.strip()!r} then {first!r}")
            continue
        if not (line.startswith("│") and previous.startswith("│")):
            continue
        body, earlier = line[1 : line.rfind("│")], previous[1 : previous.rfind("│")]
        column = len(body) - len(body.lstrip())
        if column <= 1 or not body.strip() or len(earlier) <= column:
            continue
        # A continuation: the row above has a word that starts in this row's column.
        if earlier[column - 1] != " " or earlier[column] == " ":
            continue
        first = body.split()[0]
        # The next option's row, or Typer's "[default: ...]" and "[required]", which start a
        # line of their own by design.
        if first.startswith(("-", "[")):
            continue
        if len(earlier.rstrip()) + 1 + len(first) <= len(body) - 1:
            found.append(f"{earlier.strip()!r} then {first!r}")
    return found


@pytest.mark.parametrize("path", sorted(WRITTEN), ids=lambda path: " ".join(path) or "kernelwatch")
def test_help_wraps_as_paragraphs_at_80_columns(path):
    """Issue 45: ``kernelwatch --help`` at 80 columns broke 17 command descriptions where the
    docstrings' own lines ended ("a binary search on", then "interleaved A/B" alone)."""
    result = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert _premature_breaks(result.output) == []
