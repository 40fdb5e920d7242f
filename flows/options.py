"""Command-line options every suite-driven command shares (check, bench, selfcheck, build)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

KernelOption = Annotated[
    list[str] | None, typer.Option("--kernel", "-k", help="Only this kernel (repeatable).")
]
SuiteOption = Annotated[
    str, typer.Option(help="Suite module name or path to a suite .py file (in --repo).")
]
RepoOption = Annotated[
    Path | None,
    typer.Option(help="Repository checkout the suite imports its kernels from."),
]
SeedOption = Annotated[int, typer.Option(help="Seed for the random inputs.")]
TimeoutOption = Annotated[
    float, typer.Option(help="Seconds one case may run before it counts as hung.")
]
