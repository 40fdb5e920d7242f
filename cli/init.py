"""``kernelwatch init``: put a kernel repository under kernelwatch in one command.

Finds the repository's ``@triton.jit`` kernels without importing its code
(``harness/scaffold.py``), writes a starting suite file with one spec per kernel and a
``kernelwatch.toml`` tracking the repository, and prints the next three commands.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.console import fail, stderr
from kernelwatch.harness import scaffold
from kernelwatch.harness.isolation import gitcmd

CONFIG_FILE = "kernelwatch.toml"


@app.command()
def init(
    repo: Annotated[
        Path, typer.Argument(help="The kernel repository (a git checkout's top).")
    ] = Path(),
    suite: Annotated[
        str, typer.Option(help="The suite file to write, relative to the repository.")
    ] = scaffold.SUITE_FILE,
    force: Annotated[bool, typer.Option(help="Overwrite a suite file that exists.")] = False,
) -> None:
    """Find the repository's Triton kernels and write a starting suite (one spec per kernel;
    what only you know left as todo(...), which reports the case unsupported until filled)
    and a kernelwatch.toml, then print the next three commands.

    Exit 0 when written, 2 on bad input (no git checkout, no kernel, a suite file that
    exists without --force).
    """
    if not (repo / ".git").exists():
        fail(f"{repo} is not the top of a git checkout: run init there, or pass its path", code=2)
    target = repo / suite
    if target.exists() and not force:
        fail(f"{target} exists: pass --force to overwrite it, or --suite NAME for another", code=2)
    files = gitcmd.probe(
        repo, "ls-files", "--cached", "--others", "--exclude-standard", "--", "*.py"
    )
    found = scaffold.scan(repo, (f for f in (files or "").splitlines() if f != suite))
    for note in found.skipped:
        stderr.print(f"skipped {note}", markup=False, highlight=False)
    if not found.kernels:
        fail(f"no @triton.jit function in the Python files git knows in {repo}", code=2)
    name = scaffold.suite_name(repo)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(scaffold.render_suite(found, name))
    config = repo / CONFIG_FILE
    if config.exists():
        stderr.print(f"kept {config} as it is: add the repository to it (docs/CONFIG.md)")
    else:
        branch = gitcmd.probe(repo, "rev-parse", "--abbrev-ref", "HEAD") or "main"
        branch = "main" if branch == "HEAD" else branch
        config.write_text(scaffold.render_config(repo, name, suite, found.src, branch))
        typer.echo(f"wrote {config}")
    names = ", ".join(scaffold.spec_names(found.kernels))
    typer.echo(f"wrote {target}: {len(found.kernels)} specs ({names})")
    typer.echo("fill in each todo(...) (docs/SUITES.md, From init to a green check), then:")
    options = f"--suite {shlex.quote(suite)} --repo {shlex.quote(str(repo))}"
    options += f" --src {found.src}" if found.src else ""
    typer.echo(f"  kernelwatch check {options}")
    typer.echo(f"  kernelwatch build-diff HEAD~1 HEAD {options}")
    here = config.resolve().parent == Path.cwd().resolve()
    settings = "" if here else f"KERNELWATCH_CONFIG={shlex.quote(str(config))} "
    typer.echo(f"  {settings}kernelwatch pr-check --base main --head HEAD")
