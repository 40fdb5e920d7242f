"""The options several commands share, declared once (asv's ``common_args.py`` pattern):
a command names its parameter with one of these types and gets the same flag, help and
meaning as every other command that has it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import stderr
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef, locate

KernelOption = Annotated[
    list[str] | None, typer.Option("--kernel", "-k", help="Only this kernel (repeatable).")
]
WorkloadOption = Annotated[str, typer.Option(help="Named workload, e.g. smoke or llm.")]
DtypesOption = Annotated[
    list[str] | None, typer.Option("--dtype", help="Only these dtypes (repeatable).")
]
SuiteOption = Annotated[
    str | None,
    typer.Option(
        help="Suite module name or path to a suite .py file (in --repo, else in the current "
        "directory). Default: inside a checkout kernelwatch.toml tracks, that repository's "
        "suite (with its src); elsewhere the built-in one.",
        show_default=False,
    ),
]
RepoOption = Annotated[
    Path | None,
    typer.Option(help="Repository checkout the suite imports its kernels from."),
]
SrcOption = Annotated[
    str | None,
    typer.Option(
        help="Source root inside --repo, put on sys.path before it (src for a src/ layout)."
    ),
]
SeedOption = Annotated[int, typer.Option(help="Seed for the random inputs.")]


def seconds(value: float | None) -> float | None:
    """A duration option's check: a finite number of seconds above zero (exit 2 otherwise)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise typer.BadParameter(f"must be a finite number of seconds above 0, not {value}")
    return value


TimeoutOption = Annotated[
    float,
    typer.Option(help="Seconds one case may run before it counts as hung.", callback=seconds),
]
BudgetOption = Annotated[
    float | None,
    typer.Option(help="Seconds of sampling per case before giving up on CI.", callback=seconds),
]
JsonOption = Annotated[
    bool, typer.Option("--json", help="JSON on stdout, one record per line, instead of a table.")
]
RepositoryOption = Annotated[
    str | None,
    typer.Option(help="A repository of the configuration (default: the only one)."),
]
PoolOption = Annotated[str, typer.Option(help="The pool this machine stands for.")]
PinOption = Annotated[
    Path | None, typer.Option(help="JSON/TOML file of launch configs to pin per case.")
]
SavePinsOption = Annotated[
    Path | None,
    typer.Option(
        "--save-pins",
        help="Write the configs this run used (check: verified; bench: timed) as a pin file.",
    ),
]


def suite_ref(suite: str | None, repo: Path | None, src: str | None) -> SuiteRef:
    """The suite that ``--suite``, ``--repo`` and ``--src`` name together (``suite.locate``:
    a relative ``--suite`` only the current directory has is that file). Without ``--suite``
    or ``--repo``, in a checkout the configuration tracks, it is that repository's suite, said
    in one line: a user who ran ``init`` there means their own kernels, not the built-in ones."""
    if suite is None and repo is None:
        tracked = configuration().repository_at(Path.cwd())
        if tracked is not None:
            source = Path(tracked.source).expanduser()
            stderr.print(
                f"suite: {tracked.suite} of repository {tracked.name!r} (kernelwatch.toml); "
                "--suite names another"
            )
            return SuiteRef(locate(tracked.suite, source), str(source), tracked.src or None)
    target = BUILTIN_SUITE if suite is None else suite
    return SuiteRef(locate(target, repo), str(repo) if repo is not None else None, src)
