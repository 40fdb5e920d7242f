"""`kernelwatch check`: every kernel x case x dtype against its float64 reference."""

from __future__ import annotations

from collections import Counter

import typer
from rich.text import Text

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import (
    DtypesOption,
    JsonOption,
    KernelOption,
    PinOption,
    RepoOption,
    SavePinsOption,
    SeedOption,
    SrcOption,
    SuiteOption,
    TimeoutOption,
    WorkloadOption,
    suite_ref,
)
from kernelwatch.cli.console import (
    TextTable,
    fail,
    output_console,
    read_pins,
    save_pins,
    stderr,
    stream_records,
)
from kernelwatch.harness.isolation.supervise import (
    CheckRequest,
    SelectionUnavailable,
    SuiteError,
    run_checks,
)
from kernelwatch.harness.records import CorrectnessResult

_VERDICT_STYLE = {"pass": "green", "fail": "bold red", "error": "bold red", "unsupported": "yellow"}


@app.command()
def check(
    kernel: KernelOption = None,
    workload: WorkloadOption = "smoke",
    dtype: DtypesOption = None,
    suite: SuiteOption = None,
    repo: RepoOption = None,
    src: SrcOption = None,
    seed: SeedOption = 0,
    timeout: TimeoutOption = 300.0,
    pin: PinOption = None,
    save_pins_to: SavePinsOption = None,
    json_lines: JsonOption = False,
) -> None:
    """Check every kernel x workload case x dtype against its float64 reference.

    Exit 0 when nothing failed (unsupported cases are listed but do not fail), 1 when any case
    failed or errored, 2 on bad input.
    """
    request = CheckRequest(
        suite=suite_ref(suite, repo, src),
        kernels=tuple(kernel or ()),
        workload=workload,
        dtypes=tuple(dtype or ()),
        seed=seed,
        case_timeout_s=timeout,
        pins=read_pins(pin),
    )
    try:
        results = stream_records(
            "checking",
            lambda on_plan: run_checks(request, on_plan=on_plan),
            json_lines,
            _print_table,
        )
    except (SelectionUnavailable, SuiteError) as exc:
        fail(str(exc), code=2)
    save_pins(save_pins_to, results)
    counts = Counter(r.verdict for r in results)
    stderr.print(
        f"check: {counts['pass']} pass, {counts['fail']} fail, {counts['error']} error, "
        f"{counts['unsupported']} unsupported ({len(results)} cases)"
    )
    if counts["fail"] or counts["error"]:
        raise typer.Exit(1)


def _print_table(results: list[CorrectnessResult]) -> None:
    """The verdict table on stdout; reasons shared by many rows (an interpreter gap) are
    printed once, as numbered notes under the table."""
    out = output_console(160)
    notes: dict[str, int] = {}
    table = TextTable(title="correctness")
    for column in ("kernel", "case", "dtype", "rel. error", "tolerance", "verdict", "reason"):
        table.add_column(column, overflow="fold")
    for r in results:
        reason = r.reason
        if r.verdict == "unsupported":
            reason = f"[{notes.setdefault(r.reason, len(notes) + 1)}]"
        style = _VERDICT_STYLE[r.verdict]
        table.add_row(
            r.case.kernel,
            r.case.label(),
            r.case.dtype,
            "-" if r.rel_error is None else f"{r.rel_error:.2e}",
            f"{r.tolerance:.1e}",
            Text(r.verdict, style=style),
            reason,
        )
    out.print(table)
    for text, number in notes.items():
        out.print(f"[{number}] {text}", markup=False, highlight=False)
