"""``kernelwatch serving``: serving benchmark results (vLLM's, SGLang's) stored per deployment
beside the kernels (docs/SERVING.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.arguments import JsonOption
from kernelwatch.cli.connection import open_store
from kernelwatch.cli.console import stderr
from kernelwatch.serving.formats import Given, ServingFileError, read_file
from kernelwatch.serving.results import ServingRun

serving_app = typer.Typer(
    no_args_is_help=True, help="Serving results: ingest vLLM's and SGLang's benchmark files."
)

_FROM_FILE = " (default: the file's --metadata; a value given both ways must agree)"


def _said(text: str) -> typer.models.OptionInfo:
    """An option that says what a file may say itself of its deployment."""
    return typer.Option(help=text + _FROM_FILE)


@serving_app.command(name="ingest")
def ingest_command(
    files: Annotated[list[Path], typer.Argument(help="Result files (JSON or JSON lines).")],
    deployment: Annotated[str | None, _said("The deployment's name")] = None,
    model: Annotated[str | None, _said("The model served")] = None,
    engine: Annotated[str | None, _said("The serving engine")] = None,
    engine_version: Annotated[str | None, _said("The engine's version or commit")] = None,
    gpu: Annotated[str | None, _said("The GPU model, e.g. H200")] = None,
    gpu_count: Annotated[int | None, _said("GPUs serving")] = None,
    tp: Annotated[int | None, _said("Tensor-parallel size")] = None,
    ep: Annotated[int | None, _said("Expert-parallel size")] = None,
    dataset: Annotated[str | None, _said("The request dataset")] = None,
    kernel_commit: Annotated[str | None, _said("The kernel repository's commit deployed")] = None,
    started_at: Annotated[
        str | None,
        typer.Option(help="When the run started (ISO 8601), for files that record no time"),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Store each file's runs (idempotent: a run already stored is skipped). A file that
    cannot be read is one error line and exit 2; the other files are still stored."""
    given = Given(deployment, model, engine, engine_version, gpu, gpu_count, tp, ep, dataset,
                  kernel_commit, started_at)  # fmt: skip
    read: list[tuple[Path, list[ServingRun]]] = []
    bad = 0
    for path in files:
        try:
            read.append((path, read_file(path, given)))
        except ServingFileError as exc:
            bad += 1
            stderr.print(f"error: {exc}", markup=False, highlight=False, soft_wrap=True)
    if read:
        _store(read, json_out)
    if bad:
        raise typer.Exit(2)


def _store(read: list[tuple[Path, list[ServingRun]]], json_out: bool) -> None:
    from kernelwatch.store.serving import ingest

    with open_store() as conn:
        for path, runs in read:
            for run in runs:
                stored = ingest(conn, run)
                if json_out:
                    typer.echo(json.dumps({
                        "file": str(path), "run_key": run.key, "run_pk": stored.run_pk,
                        "stored": stored.stored, "status": run.status,
                        "deployment": run.deployment.name, "kernel_commit": run.kernel_commit,
                    }))  # fmt: skip
                else:
                    what = "stored" if stored.stored else "already stored"
                    typer.echo(f"{path}: {what}: {run.status} run of "
                               f"{run.deployment.label()} at {run.kernel_commit}")  # fmt: skip
