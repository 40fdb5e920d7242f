"""``kernelwatch selfcheck``: whether the timing can be trusted on this GPU, in one run.

The stages, their deadlines and the report folder are ``harness/selfcheck/stages.py``'s (kernel
code runs only in child processes); the judging is ``analysis/trust.py``'s and the summary
``report/trust_summary.py``'s, passed to the harness from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import date
from pathlib import Path
from typing import Annotated

import typer
from rich.text import Text

from kernelwatch.analysis import trust
from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import (
    KernelOption,
    RepoOption,
    SrcOption,
    SuiteOption,
    seconds,
    suite_ref,
)
from kernelwatch.cli.console import fail, progress, stderr
from kernelwatch.config.redact import printable
from kernelwatch.harness.isolation.supervise import SelectionUnavailable
from kernelwatch.harness.selfcheck.stages import (
    Backend,
    ChildBackend,
    Judging,
    Outcome,
    SelfcheckPlan,
    run_stages,
)
from kernelwatch.harness.suite import BUILTIN_SUITE
from kernelwatch.report.trust_summary import render
from kernelwatch.serving.step_trace import read_step

_STATUS_STYLE = {"pass": "green", "fail": "bold red", "incomplete": "yellow", "skipped": "dim"}

#: What the harness leaves to analysis and report: the A/A verdicts, the findings, the summary.
JUDGING = Judging(
    pair=trust.pair_verdict,
    findings=trust.judge,
    summary=render,
    settled=trust.settled,
    trace=read_step,
)


def run_selfcheck_stages(
    plan: SelfcheckPlan,
    backend: Backend,
    out_root: Path,
    day: date,
    on_stage: Callable[[str], None] = lambda message: None,
) -> Outcome[trust.Finding]:
    """The harness's self-check, judged by ``analysis/trust.py`` (``on_stage`` gets each
    stage's name and the measurements' progress)."""
    return run_stages(plan, backend, JUDGING, out_root, day, on_stage)


@app.command()
def selfcheck(
    out: Annotated[
        Path, typer.Option(help="Where the report folder <gpu>-<date>/ is written.")
    ] = Path("docs/gpu"),
    kernel: KernelOption = None,
    workload: Annotated[
        str, typer.Option(help="Workload of the A/A, agreement and coverage cases.")
    ] = "llm",
    dtype: Annotated[str, typer.Option(help="Dtype of every case.")] = "bf16",
    check_workload: Annotated[
        str, typer.Option(help="Workload of the correctness cases.")
    ] = "smoke",
    suite: SuiteOption = BUILTIN_SUITE,
    repo: RepoOption = None,
    src: SrcOption = None,
    budget: Annotated[
        float | None,
        typer.Option(
            help="Seconds of sampling per measurement and per A/A case.", callback=seconds
        ),
    ] = None,
    deadline: Annotated[
        float,
        typer.Option(
            help="Seconds the whole self-check may take, every stage included.", callback=seconds
        ),
    ] = SelfcheckPlan.deadline_s,
) -> None:
    """Settle whether the timing can be trusted on this GPU: A/A false regressions, CI
    coverage, agreement with do_bench and torch.utils.benchmark, %SOL, event granularity,
    clocks and throttling, bf16 correctness, and ncu when present; one pass/fail line each.
    Writes JSON and summary.md into OUT/<gpu>-<date>/ as each stage finishes. Exit 0 when
    every question passed, 1 when any failed or could not be settled, 2 on bad input."""
    plan = SelfcheckPlan(
        suite=suite_ref(suite, repo, src),
        check_workload=check_workload,
        deadline_s=deadline,
    )
    options = replace(plan.options, kernels=tuple(kernel or ()), workload=workload, dtype=dtype)
    if budget is not None:
        options = replace(options, bench=replace(options.bench, budget_s=budget))
        plan = replace(plan, aa_options=replace(plan.aa_options, budget_s=budget))
    plan = replace(plan, options=options)
    try:
        with progress() as bar_ui, ChildBackend(trusted=plan.trusted) as backend:
            bar = bar_ui.add_task("self-check", total=None)
            outcome = run_selfcheck_stages(
                plan, backend, out, date.today(), lambda m: bar_ui.update(bar, description=m)
            )
    except SelectionUnavailable as exc:
        fail(str(exc), code=2)
    for finding in outcome.findings:
        style = _STATUS_STYLE[finding.status]
        stderr.print(
            Text.assemble((f"{finding.status.upper():10}", style), f" {finding.question}: "),
            Text(printable(finding.line)),
        )
    stderr.print(f"selfcheck: wrote {outcome.folder}", markup=False, highlight=False)
    if not outcome.settled:
        raise typer.Exit(1)
