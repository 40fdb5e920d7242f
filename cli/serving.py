"""``kernelwatch serving``: serving benchmark results (vLLM's, SGLang's) stored per deployment
beside the kernels (docs/SERVING.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.arguments import JsonOption
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.connection import open_store
from kernelwatch.cli.console import TextTable, fail, output_console, stderr
from kernelwatch.serving.formats import Given, ServingFileError, read_file
from kernelwatch.serving.judge import ServingChange
from kernelwatch.serving.results import ServingRun
from kernelwatch.serving.traces import TraceError, TraceProfile, read_trace

serving_app = typer.Typer(
    no_args_is_help=True,
    help="Serving results: ingest vLLM's and SGLang's benchmark files, judge them.",
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
    trace: Annotated[
        Path | None,
        typer.Option(
            help="A profiler trace of the run's serving step (torch.profiler's Chrome trace, "
            "or nsys export --type sqlite): its kernels' shares of the step's GPU time. "
            "With one result file of one run."
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Store each file's runs (idempotent: a run already stored is skipped). A file that
    cannot be read is one error line and exit 2; the other files are still stored, and so
    is a run whose --trace cannot be read."""
    given = Given(deployment, model, engine, engine_version, gpu, gpu_count, tp, ep, dataset,
                  kernel_commit, started_at)  # fmt: skip
    read: list[tuple[Path, list[ServingRun]]] = []
    bad = 0
    for path in files:
        try:
            read.append((path, read_file(path, given)))
        except ServingFileError as exc:
            bad += 1
            _error(str(exc))
    profile = None
    if trace is not None:
        if len(files) != 1 or (read and len(read[0][1]) != 1):
            fail("--trace belongs to one run: give one result file holding one run", code=2)
        try:
            profile = read_trace(trace)
        except TraceError as exc:
            bad += 1
            _error(str(exc))
    if read:
        _store(read, json_out, profile)
    if bad:
        raise typer.Exit(2)


def _error(message: str) -> None:
    stderr.print(f"error: {message}", markup=False, highlight=False, soft_wrap=True)


def _store(
    read: list[tuple[Path, list[ServingRun]]], json_out: bool, profile: TraceProfile | None
) -> None:
    from kernelwatch.store.serving import ingest, ingest_trace

    with open_store() as conn:
        for path, runs in read:
            for run in runs:
                stored = ingest(conn, run)
                if profile is not None:
                    trace_id, new = ingest_trace(conn, stored.run_pk, profile)
                    what = "stored" if new else "already stored"
                    stderr.print(f"trace #{trace_id} of run {stored.run_pk} {what}: "
                                 f"{len(profile.kernels)} kernels, {profile.gpu_ns / 1e6:.3f} "
                                 f"ms of GPU time ({profile.source})", markup=False)  # fmt: skip
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


@serving_app.command(name="detect")
def detect_command(
    deployment: Annotated[
        str | None, typer.Option(help="Judge this deployment only (default: every one)")
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Judge each deployment's history of the judged metrics (TTFT, TPOT and ITL median and
    p99, output throughput) with kernelwatch.toml's [detection]: store the change points and
    open a serving regression per run that made any of them worse, with the kernel commits
    served before and after. Judging again opens nothing twice."""
    from kernelwatch.flows.serving_results import judge_deployments
    from kernelwatch.store import serving as store

    config = configuration().thresholds.detection
    with open_store() as conn:
        names = None if deployment is None else [deployment]
        if names and deployment not in {d.name for _i, d in store.deployments(conn)}:
            fail(f"no deployment named {deployment!r} is stored; see docs/SERVING.md", code=2)
        judged = judge_deployments(conn, config, names)
    for j in judged:
        if json_out:
            typer.echo(json.dumps({
                "deployment": j.deployment, "new_changes": j.recorded.new_changes,
                "opened": list(j.recorded.opened), "grown": list(j.recorded.grown),
                "changes": [_change_json(c) for c in j.changes],
            }))  # fmt: skip
            continue
        for c in j.changes:
            typer.echo(f"{j.deployment}: {c.metric} {c.magnitude_pct:+.1f}% {c.direction}"
                       f"{' (provisional)' if c.provisional else ''} at kernel "
                       f"{c.run.kernel_commit} (was {c.previous.kernel_commit}), "
                       f"{c.run.started_at.isoformat()}")  # fmt: skip
        for regression_id in j.recorded.opened:
            typer.echo(f"{j.deployment}: opened serving regression #{regression_id}; "
                       f"kernelwatch regressions show {regression_id}")  # fmt: skip


def _change_json(change: ServingChange) -> dict[str, object]:
    return {
        "metric": change.metric, "direction": change.direction,
        "magnitude_pct": change.magnitude_pct, "p_value": change.p_value,
        "provisional": change.provisional, "run_pk": change.run.run_pk,
        "started_at": change.run.started_at.isoformat(),
        "kernel_commit": change.run.kernel_commit,
        "previous_kernel_commit": change.previous.kernel_commit,
    }  # fmt: skip


@serving_app.command(name="compare")
def compare_command(
    run_a: Annotated[int, typer.Argument(help="Run A's id (kernelwatch serving ingest --json)")],
    run_b: Annotated[int, typer.Argument(help="Run B's id")],
    json_out: JsonOption = False,
) -> None:
    """Run B against run A from their per-request samples: for each latency both stored,
    p50 and p99 SAME, SLOWER, FASTER or AMBIGUOUS on a 3% margin (the kernel A/B's rank
    test and bootstrap). Exit 2 when a run is unknown or the two share no samples."""
    from kernelwatch.serving.judge import compare_runs
    from kernelwatch.serving.results import LATENCIES
    from kernelwatch.store import serving as store

    with open_store() as conn:
        sides = []
        for pk in (run_a, run_b):
            stored = {lat: store.samples(conn, pk, lat) for lat in LATENCIES}
            sides.append({lat: values for lat, values in stored.items() if values is not None})
    try:
        verdicts = compare_runs(*sides)
    except ValueError as exc:
        fail(f"cannot compare runs {run_a} and {run_b}: {exc}", code=2)
    for v in verdicts:
        if json_out:
            typer.echo(json.dumps({
                "latency": v.latency, "statistic": v.statistic, "verdict": v.verdict.verdict,
                "ratio": v.verdict.ratio, "ci_low": v.verdict.ci_low,
                "ci_high": v.verdict.ci_high, "p_value": v.verdict.p_value,
                "n_a": v.verdict.n_a, "n_b": v.verdict.n_b, "reason": v.verdict.reason,
            }))  # fmt: skip
        else:
            typer.echo(f"{v.latency} {v.statistic}: {v.verdict.verdict} "
                       f"x{v.verdict.ratio:.3f} [{v.verdict.ci_low:.3f}, {v.verdict.ci_high:.3f}]"
                       f" (n {v.verdict.n_a}/{v.verdict.n_b}): {v.verdict.reason}")  # fmt: skip


@serving_app.command(name="explain")
def explain_command(
    run: Annotated[
        int | None, typer.Argument(help="The run's id (default: the newest run with a trace)")
    ] = None,
    repository: Annotated[
        str | None,
        typer.Option(
            help="The kernel repository to match names in (default: the one whose "
            "commit the run served)"
        ),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """The run's step as its trace saw it: each GPU kernel, the kernelwatch kernel it is
    (by the names the build stage recorded, or as the library a kernel is measured against),
    its launches, GPU time and share of the step; unmatched kernels are listed too. Where a
    serving regression ends at the run (or starts right after it): how much of it the
    kernels explain, each kernel's change between the kernel commits served before and
    after (nightly history) times its share."""
    from kernelwatch.flows.serving_results import explain_run
    from kernelwatch.store import serving as store

    with open_store() as conn:
        pk = run if run is not None else store.latest_traced_run(conn)
        if pk is None:
            fail("no serving run has a trace; ingest one with kernelwatch serving ingest "
                 "RESULT --trace FILE", code=2)  # fmt: skip
        found = explain_run(conn, pk, repository)
    if found is None:
        fail(f"run {pk} has no trace stored; ingest one with --trace", code=2)
    profile, repo, matches = found.profile, found.repository, found.matches
    explained = [(c.regression_id, e) for c, e in found.explained]
    unexplainable = found.unexplainable
    if json_out:
        for regression_id, e in explained:
            typer.echo(json.dumps({
                "run_pk": pk, "regression_id": regression_id, "metric": e.metric,
                "observed_pct": e.observed_pct, "explained_pct": e.explained_pct,
                "unexplained_pct": e.unexplained_pct, "sentence": e.sentence(),
                "kernels": [{"kernel": p.kernel, "ratio": p.ratio, "share": p.share,
                             "explained_pct": p.explained_pct} for p in e.parts],
                "unmeasured": list(e.unmeasured), "unmatched_share": e.unmatched_share,
            }))  # fmt: skip
        for m in matches:
            typer.echo(json.dumps({
                "run_pk": pk, "kernel": m.trace.name, "short_name": m.trace.short_name,
                "matched": m.kernel, "role": m.role, "library": m.library,
                "launches": m.trace.launches, "gpu_ns": m.trace.gpu_ns, "share": m.trace.share,
            }))  # fmt: skip
        return
    where = profile.source + (f", {profile.device}" if profile.device else "")
    table = TextTable(title=f"run {pk}: {profile.gpu_ns / 1e6:.3f} ms of kernels ({where})")
    for column in ("trace kernel", "kernelwatch kernel", "launches", "GPU ms", "share"):
        table.add_column(column, overflow="fold")
    for m in matches:
        what = m.kernel or "unmatched"
        if m.role == "baseline":
            what = f"{m.kernel} (its baseline, {m.library})"
        elif m.kernel is None and m.library:
            what = f"unmatched ({m.library})"
        table.add_row(m.trace.short_name, what, str(m.trace.launches),
                      f"{m.trace.gpu_ns / 1e6:.3f}", f"{m.trace.share:.1%}")  # fmt: skip
    output_console(120).print(table)
    matched = sum(m.trace.share for m in matches if m.kernel is not None)
    named = repo or "no repository (give --repository)"
    typer.echo(f"matched {matched:.1%} of the step's GPU time in {named}; "
               f"unmatched {1 - matched:.1%}")  # fmt: skip
    for regression_id, e in explained:
        typer.echo(f"serving regression #{regression_id}: {e.sentence()}"
                   + (f"; not measured at both commits: {', '.join(e.unmeasured)}"
                      if e.unmeasured else ""))  # fmt: skip
    for regression_id in unexplainable:
        typer.echo(f"serving regression #{regression_id}: kernelwatch has not measured the "
                   "kernel commits served before and after it in this repository: its "
                   "kernels cannot explain it")  # fmt: skip
