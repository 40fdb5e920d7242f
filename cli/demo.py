"""``kernelwatch demo``: the main job. The nightly pipeline over a demo kernel repository's
history, on this machine, ending with the regression found and bisected to its commit.

It builds a git repository from the built-in kernels with one planted regression
(``flows/demo_repo.py``), writes a configuration for it, gives it a fresh database on the embedded
server (``kernelwatch_demo``, so your own history is untouched), then runs the real
``nightly`` flow once per night of the history, oldest first, through Prefect's local
API. The night the culprit lands, the nightly suspects the slower point, confirms it by an
A/B of the previous nightly head against tonight's head, opens the regression and bisects
the night's commits to the culprit; the demo says how many nights after it landed that was.
Last, a deployment serving each night's head gets its serving results (simulated, in vLLM's
format: ``flows/demo_serving.py``) ingested and judged by the ``serving-ingest`` flow: the
culprit's deploy moves TPOT, opening a serving regression beside the kernel one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from datetime import date
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelwatch.analysis.thresholds import SuspicionThresholds
from kernelwatch.cli.app import app
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import fail, progress, stderr
from kernelwatch.cli.localrun import prepare_prefect, print_nightly
from kernelwatch.flows.demo_repo import CULPRIT_KERNEL
from kernelwatch.harness.isolation.sandbox import contained

DEMO_DATABASE = "kernelwatch_demo"


def demo_config(
    repo: Path,
    suite: str,
    reports: Path,
    clean_nights: int,
    quick: bool = False,
    gpu: bool = False,
) -> str:
    """The demo's kernelwatch.toml: one repository on the local pool, the interpreter's
    cheap selection (``quick``: the culprit's kernel, no build stage), an A/B margin for
    timings on a CPU, and a suspicion test that can judge the night after ``clean_nights``.
    Without a ``gpu`` the kernels run in the interpreter, timed by the child's CPU time."""
    from kernelwatch.harness.timing.timers import CPU_TIME_TIMER  # scipy: not for every command

    kernels = json.dumps([CULPRIT_KERNEL] if quick else [])
    timer = json.dumps("auto" if gpu else CPU_TIME_TIMER)
    archs = json.dumps([] if quick else ["sm_90a", "sm_100a"])
    min_history = min(SuspicionThresholds().min_history, clean_nights)
    return f"""\
# Written by `kernelwatch demo`. The keys are documented in docs/CONFIG.md.
[[repositories]]
name = "kwdemo"
source = "{repo}"
suite = "{suite}"
branch = "main"
workload = "smoke"
kernels = {kernels}
dtypes = ["fp32"]
archs = {archs}

# On the CPU the interpreter's planted 3x is 3x its CPU time, which other processes' load
# barely moves; the wall clock would count the time they hold the cores.
[bench]
timer = {timer}
baseline = false
min_samples = 10
budget_s = 0.2

# The interpreter's timings wander by a few percent, and by up to ~10% between the sides of
# an A/B of the same code when other jobs load the cores; the planted regression is ~3x.
[verdict]
margin = 0.2

# The interpreter's night-to-night noise under other jobs' load reaches tens of percent,
# where the fleet's z = 4 could miss the 3x step judged against five nights: suspect anything
# 50% off its nights' median (a false suspect only costs an A/B of a few seconds).
[confirm]
z = 1.5
min_change = 0.5
min_history = {min_history}

[bisect]
budget_s = 120

[run]
case_timeout_s = 120
report_dir = "{reports}"
"""


@app.command()
def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Where the demo repository, config and reports go.")
    ] = Path("kernelwatch-demo"),
    nights: Annotated[
        int,
        typer.Option(
            help="Nights of history (the culprit lands in the one before the last).", min=4, max=60
        ),
    ] = 7,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Only the culprit's kernel, and no build stage: a fraction of the time.",
        ),
    ] = False,
) -> None:
    """Run the nightly pipeline over a demo repository's history with a planted regression,
    confirm it the night it lands, bisect it, and name the culprit. Exit 0 when exactly one
    regression was opened and bisection named the planted commit as its culprit, 1
    otherwise; any other regression opened is printed."""
    prepare_prefect()
    from kernelwatch.config.database import URL_ENV
    from kernelwatch.config.settings import CONFIG_ENV
    from kernelwatch.flows.demo_repo import make_demo_repo
    from kernelwatch.flows.nightly import nightly
    from kernelwatch.store import migrate
    from kernelwatch.store.embedded import EmbeddedError, EmbeddedServer

    root = directory.resolve()
    for stale in ("repo", "serving"):
        if (root / stale).exists():
            shutil.rmtree(root / stale)
    root.mkdir(parents=True, exist_ok=True)
    # Five clean nights or more make the regime tonight's point is judged against; one night
    # after the culprit shows the regression is not opened again.
    culprit_night = nights - 2
    made = make_demo_repo(root / "repo", nights=nights, culprit_night=culprit_night)
    config_path = root / "kernelwatch.toml"
    # The kernel child picks the device the same way (harness/device.py).
    import torch

    config_path.write_text(
        demo_config(
            made.path, made.suite, root / "reports", culprit_night, quick, torch.cuda.is_available()
        )
    )
    server = EmbeddedServer(configuration().database.pg_dir)
    try:
        server.ensure_running()
        url = server.recreate_database(DEMO_DATABASE)
    except EmbeddedError as exc:
        fail(str(exc), code=1)
    migrate.upgrade(url)
    os.environ[URL_ENV] = url
    os.environ[CONFIG_ENV] = str(config_path)
    stderr.print(
        f"demo: {len(made.commits)} commits over {nights} nights in {made.path}; "
        f"one of them slows down {made.culprit_kernel}"
    )
    last = None
    bisections = []
    alerted: int | None = None
    # The demo's repository is kernelwatch's own generated code, not a commit under test: on a
    # host without namespaces (a laptop that restricts user namespaces) it still runs, and
    # each sandbox records that it had none.
    trusted = contained("the demo's repository is kernelwatch's own code, not a commit under test")
    with trusted, progress() as bar_ui:
        bar = bar_ui.add_task("nightly", total=len(made.nights))
        for index, (date, sha) in enumerate(made.nights):
            bar_ui.update(bar, description=f"night {index + 1}/{nights} {date} {sha[:8]}")
            last = nightly(repository="kwdemo", rev=sha)
            bisections.extend(last.bisections)
            if not stderr.is_terminal:  # no live bar in a log: a line per night instead
                stderr.print(
                    f"night {index + 1}/{nights} {date} {sha[:8]}: {last.commit.status}, "
                    f"{last.commit.measured} timed",
                    highlight=False,
                )
            if last.opened:
                stderr.print(f"night {index + 1}: regression(s) {last.opened} opened")
                if alerted is None and index >= culprit_night:
                    alerted = index
            bar_ui.update(bar, advance=1)
    assert last is not None
    print_nightly(last)
    for bisection in bisections:
        stderr.print(f"regression #{bisection.regression_id}: {bisection.line()}", markup=False)
    _serve(root / "serving", made.nights, culprit_night)
    found, others = judge(_regressions(), made.culprit)
    for line in others:
        stderr.print(f"also opened: {line}", markup=False)
    verdict = "found it" if found else "did not find it alone"
    landed = f"landed in night {culprit_night + 1}"
    when = (
        f"{landed}, alerted in night {alerted + 1}: "
        f"alerted {alerted - culprit_night} nights after it landed"
        if alerted is not None
        else f"{landed}, never alerted"
    )
    stderr.print(
        f"planted: {made.culprit[:12]} in {made.culprit_kernel}, {when}; bisection {verdict}",
        markup=False,
    )
    if not found:
        raise typer.Exit(1)


def judge(regressions: list[dict[str, Any]], planted: str) -> tuple[bool, list[str]]:
    """The demo's verdict on the regressions it opened (rows of ``report_regressions``):
    found when exactly one was opened and bisection named the planted commit as its culprit.
    Also returns a line for every regression but that one, so a false alarm or a wrong
    culprit is shown even when the planted one was found."""
    hits = [r for r in regressions if r["culprit_sha"] == planted]
    others = [
        f"regression #{r['regression_id']} {r['title']!r}, culprit "
        f"{(r['culprit_sha'] or 'none')[:12]}"
        for r in regressions
        if r not in hits[:1]
    ]
    return len(regressions) == 1 and len(hits) == 1, others


def _regressions() -> list[dict[str, Any]]:
    """The kernel regressions of the demo repository (its serving one is judged apart)."""
    from kernelwatch.flows.tasks import store_connection
    from kernelwatch.store.triage_state import list_regressions

    with store_connection() as conn:
        return [r for r in list_regressions(conn, "all", "kwdemo") if r["kind"] != "serving"]


def _serve(folder: Path, nights: Sequence[tuple[date, str]], culprit_night: int) -> None:
    """Drop the demo deployment's serving results in ``folder`` and run the serving-ingest
    flow over it, as the scheduled deployment would; say what it found."""
    from kernelwatch.flows.demo_serving import METADATA, write_results
    from kernelwatch.flows.serving_results import serving_ingest

    paths = write_results(folder, nights, culprit_night)
    summary = serving_ingest(folder=str(folder))
    stderr.print(
        f"serving (simulated): {summary.ingested.stored} vLLM results of "
        f"{METADATA['deployment']} over {len(nights)} nights in {folder} "
        f"({len(paths)} files) ingested and judged",
        markup=False,
    )
    for line in summary.changes:
        stderr.print(f"serving: {line}", markup=False)
    for regression_id in summary.opened:
        stderr.print(
            f"serving: regression #{regression_id} opened (kernelwatch regressions show "
            f"{regression_id}; dashboard kw-serving)",
            markup=False,
        )
