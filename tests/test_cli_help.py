"""Every command's ``--help`` prints its help texts as written: square-bracketed text such as
kernelwatch.toml's ``[detection]`` and ``[[thresholds]]`` is shown, never read as Rich
markup and dropped."""

from __future__ import annotations

import inspect
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
