"""``kernelwatch selfcheck``: this harness next to the common alternatives on one GPU.

Kernel code runs only in the runner child (``harness/supervise.py``); this process writes
the report that comes back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import KernelOption, RepoOption, SrcOption, SuiteOption, suite_ref
from kernelwatch.cli.console import fail, progress, stderr
from kernelwatch.harness.suite import BUILTIN_SUITE
from kernelwatch.harness.supervise import (
    SelectionUnavailable,
    SelfcheckRequest,
    SuiteError,
    run_selfcheck,
)


@app.command()
def selfcheck(
    out: Annotated[Path, typer.Option(help="Folder for selfcheck.md.")] = Path("out/selfcheck"),
    kernel: KernelOption = None,
    workload: Annotated[
        str, typer.Option(help="Workload to take one case per kernel from.")
    ] = "llm",
    dtype: Annotated[str, typer.Option(help="Dtype of every case.")] = "bf16",
    suite: SuiteOption = BUILTIN_SUITE,
    repo: RepoOption = None,
    src: SrcOption = None,
    budget: Annotated[
        float | None, typer.Option(help="Seconds of sampling per measurement.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds the whole self-check may take.")] = 600.0,
) -> None:
    """Compare this harness with triton.testing.do_bench and torch.utils.benchmark on the
    same kernels in one process, measure A/A noise and the device's ceilings, and write a
    markdown report to OUT/selfcheck.md. Exit 2 on bad input, 1 if the self-check failed."""
    request = SelfcheckRequest(
        suite=suite_ref(suite, repo, src),
        kernels=tuple(kernel or ()),
        workload=workload,
        dtype=dtype,
        budget_s=budget,
        timeout_s=timeout,
    )
    try:
        with progress() as bar_ui:
            bar = bar_ui.add_task("self-check", total=None)
            report = run_selfcheck(request, lambda m: bar_ui.update(bar, description=m))
    except SelectionUnavailable as exc:
        fail(str(exc), code=2)
    except SuiteError as exc:
        fail(str(exc), code=1)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "selfcheck.md"
    path.write_text(report)
    stderr.print(f"selfcheck: wrote {path}")
