"""``kernelwatch bench``: timing from the command line.

Kernel code runs only in the kernel child (``harness/isolation/supervise.py``); this process formats
what comes back.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer
from rich.text import Text

from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import (
    BudgetOption,
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
    BenchRequest,
    SelectionUnavailable,
    SuiteError,
    run_benches,
)
from kernelwatch.harness.records import Measurement
from kernelwatch.harness.timing.request import BenchOptions

_STATUS_STYLE = {"ok": "green", "error": "bold red", "unsupported": "yellow"}


@app.command()
def bench(
    kernel: KernelOption = None,
    workload: WorkloadOption = "smoke",
    dtype: DtypesOption = None,
    suite: SuiteOption = None,
    repo: RepoOption = None,
    src: SrcOption = None,
    seed: SeedOption = 0,
    timer: Annotated[
        str,
        typer.Option(help="auto, cuda-events, cuda-graph, cpu-perf-counter or cpu-process-time."),
    ] = "auto",
    l2: Annotated[
        str | None, typer.Option(help="cold (flushed before each sample) or warm.")
    ] = None,
    target_ci: Annotated[
        float, typer.Option(help="Stop once the median's 95% CI half-width is under this.")
    ] = 0.005,
    budget: BudgetOption = None,
    pin: PinOption = None,
    save_pins_to: SavePinsOption = None,
    measure_ceilings: Annotated[
        bool, typer.Option(help="Measure copy bandwidth and a bf16 GEMM; use them for %SOL.")
    ] = False,
    no_baseline: Annotated[
        bool, typer.Option("--no-baseline", help="Skip timing the stock-library baseline.")
    ] = False,
    timeout: TimeoutOption = 300.0,
    json_lines: JsonOption = False,
) -> None:
    """Time every kernel x workload case x dtype, with its baseline interleaved.

    Exit 0 when every case was measured or is unsupported here, 1 when any case errored,
    2 on bad input.
    """
    options = BenchOptions(
        timer=timer,
        l2=l2,
        target_rel_ci=target_ci,
        budget_s=budget,
        baseline=not no_baseline,
        measure_ceilings=measure_ceilings,
        pins=read_pins(pin),
    )
    request = BenchRequest(
        suite=suite_ref(suite, repo, src),
        kernels=tuple(kernel or ()),
        workload=workload,
        dtypes=tuple(dtype or ()),
        seed=seed,
        case_timeout_s=timeout,
        options=options,
    )
    try:
        records = stream_records(
            "timing",
            lambda on_plan: run_benches(request, on_plan=on_plan, on_carry=_show_ceilings),
            json_lines,
            _print_table,
        )
    except (SelectionUnavailable, SuiteError) as exc:
        fail(str(exc), code=2)
    save_pins(save_pins_to, records)
    counts = Counter(r.status for r in records)
    stderr.print(
        f"bench: {counts['ok']} measured, {counts['error']} error, "
        f"{counts['unsupported']} unsupported ({len(records)} cases)"
    )
    if counts["error"]:
        raise typer.Exit(1)


def _show_ceilings(key: str, value: Any) -> None:
    if key != "ceilings":
        return
    copy, gemm = value.get("copy_gbps"), value.get("bf16_tflops")
    line = "measured ceilings: copy " + ("not measured" if copy is None else f"{copy:.4g} GB/s")
    line += ", bf16 GEMM " + (
        "not measured" if gemm is None else f"{gemm:.3g} TFLOP/s (n={value['gemm_size']})"
    )
    if copy is None or gemm is None:
        line += "; the datasheet stands in for what was not measured"
    stderr.print(line, markup=False, highlight=False)
    for problem in value.get("problems", ()):
        stderr.print(f"  {problem}", markup=False, highlight=False)


def format_ns(ns: float | None) -> str:
    """A duration with a unit that keeps 3-4 significant digits: ``12.3 us``, ``1.25 ms``."""
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _number(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _bus(r: Measurement) -> str:
    """A collective's bus bandwidth (nccl-tests), and its share of the interconnect's peak."""
    moved = r.bandwidth
    assert moved is not None
    peak = f" ({100 * moved.busbw_gbps / moved.peak_gbps:.0f}%)" if moved.peak_gbps else ""
    return f"{moved.busbw_gbps:.3g} bus{peak}"


def _print_table(records: list[Measurement]) -> None:
    """The measurement table on stdout; reasons shared by many rows are numbered notes."""
    out = output_console(200)
    notes: dict[str, int] = {}
    table = TextTable(title="bench" + (f" ({records[0].method.label()})" if records else ""))
    columns = ("kernel", "case", "dtype", "median", "95% CI", "samples", "TFLOP/s", "GB/s")
    # In the interpreter the "speedup" is Triton's interpreter against torch's CPU kernels
    # (~0.004x): a number about the CPU, never about the kernel on a GPU.
    interpreted = any(r.device.interpreter for r in records)
    speedup = "speedup (interpreter)" if interpreted else "speedup"
    for column in (*columns, "%SOL", speedup, "status"):
        table.add_column(column, overflow="fold")
    for r in records:
        s, sol = r.summary, r.sol
        status = (
            r.status
            if not r.reason
            else f"{r.status} [{notes.setdefault(r.reason, len(notes) + 1)}]"
        )
        style = _STATUS_STYLE.get(r.status, "")
        table.add_row(
            r.case.kernel,
            r.case.label(),
            r.case.dtype,
            format_ns(s.median_ns) if s else "-",
            f"±{100 * s.rel_ci_halfwidth:.2f}% {s.stop}" if s else "-",
            f"{s.n}/{len(r.samples_ns)}" if s else "-",
            _number(sol.tflops if sol else None, ".3g"),
            _number(sol.gbps if sol else None, ".3g") if not r.bandwidth else _bus(r),
            f"{sol.pct_sol:.1f} {sol.bound}" if sol and sol.pct_sol is not None else "-",
            _number(r.speedup, ".3g"),
            Text(status, style=style),
        )
    out.print(table)
    for text, number in notes.items():
        out.print(f"[{number}] {text}", markup=False, highlight=False)
