"""The GPU self-check: this harness next to the common alternatives, on the same kernels.

For one case per kernel (the middle case of a workload, ``llm`` by default), in one
process: our median and 95% CI (events, cold L2) and our CUDA-graph time (warm L2), next to
``triton.testing.do_bench`` (mean and median; it flushes L2 too) and
``torch.utils.benchmark`` (host clock with a synchronize, warm L2). A/A noise: the same
kernel measured twice, by us and by ``do_bench``. Then the device's measured ceilings next
to the datasheet. The result is one markdown report (``docs/TIMING.md`` explains it).

On the CPU ``do_bench`` and graph mode cannot run (they need a CUDA driver) and show as
``n/a``; the rest runs, which is how CI exercises this module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kernelwatch.harness.device import Device, software_info
from kernelwatch.harness.records import CaseId, Summary
from kernelwatch.harness.spec import KernelSpec, Suite
from kernelwatch.harness.suite import select_tasks
from kernelwatch.harness.timing.case import BenchSession, prepare
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.roofline import Ceilings, Peaks, datasheet_peaks
from kernelwatch.harness.timing.sampling import summarize
from kernelwatch.harness.timing.timers import GRAPH_TIMER, Timer, make_timer, time_arms


@dataclass(frozen=True)
class SelfcheckOptions:
    """What to self-check; ``budget_s`` None takes the device's bench default."""

    kernels: tuple[str, ...] = ()
    workload: str = "llm"
    dtype: str = "bf16"
    budget_s: float | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelfcheckOptions:
        return cls(tuple(data["kernels"]), data["workload"], data["dtype"], data["budget_s"])


@dataclass(frozen=True)
class Row:
    """One kernel's times in ns under every tool (None where a tool cannot run here)."""

    kernel: str
    case: str
    ours: Summary | None = None
    ours_again: Summary | None = None
    graph_ns: float | None = None
    do_bench_mean_ns: float | None = None
    do_bench_median_ns: float | None = None
    do_bench_again_ns: float | None = None
    torch_benchmark_ns: float | None = None
    note: str = ""


def run_selfcheck(
    suite: Suite, device: Device, options: SelfcheckOptions, progress: Callable[[str], None]
) -> str:
    """Measure every selected kernel with every tool and return the markdown report.
    Raises the suite's SelectionError for kernels or a workload it lacks."""
    select_tasks(suite, options.kernels, options.workload, [options.dtype])  # validates
    started = time.monotonic()
    progress("measuring ceilings")
    session = BenchSession.open(
        device, BenchOptions(budget_s=options.budget_s, measure_ceilings=True), software_info()
    )
    cuda = device.info.kind == "cuda"
    graph = make_timer("cuda", GRAPH_TIMER, None, device.info.l2_bytes) if cuda else None
    rows = []
    for spec in suite.kernels:
        if options.kernels and spec.name not in options.kernels:
            continue
        if options.workload not in spec.workloads or not isinstance(spec, KernelSpec):
            continue  # a distributed case is compared with nothing single-process
        progress(spec.name)
        rows.append(_row(spec, suite.name, options, session, graph))
    return render(
        rows,
        session,
        datasheet_peaks(device.info.name),
        options,
        time.monotonic() - started,
    )


def _row(
    spec: KernelSpec,
    suite: str,
    options: SelfcheckOptions,
    session: BenchSession,
    graph: Timer | None,
) -> Row:
    cases = spec.workloads[options.workload]
    params = cases[len(cases) // 2]
    case = CaseId(suite, spec.name, options.workload, dict(params), options.dtype)
    device = session.device
    if options.dtype in device.unsupported_dtypes:
        return Row(spec.name, case.label(), note=f"unsupported here: {options.dtype}")
    try:
        fn = prepare(spec, case, device, 0, None).kernel
        ours = _ours(fn, session.timer, session)
        row = Row(
            spec.name,
            case.label(),
            ours=ours,
            ours_again=_ours(fn, session.timer, session),
            torch_benchmark_ns=_torch_benchmark(fn, device),
        )
        if graph is None:
            return row
        from triton.testing import do_bench

        # do_bench's times are in ms.
        return replace(
            row,
            graph_ns=_median(_ours(fn, graph, session)),
            do_bench_mean_ns=do_bench(fn, return_mode="mean") * 1e6,
            do_bench_median_ns=do_bench(fn, return_mode="median") * 1e6,
            do_bench_again_ns=do_bench(fn, return_mode="mean") * 1e6,
        )
    except Exception as exc:  # one kernel's failure is a row of the report
        message = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
        return Row(spec.name, case.label(), note=message[:200])


def _ours(fn: Callable[[], object], timer: Timer, session: BenchSession) -> Summary | None:
    rule = session.resolved.rule
    collected, _ = time_arms([fn], timer, session.probe, rule, session.resolved.warmup_s)
    return summarize(collected.arms[0], collected.stop, rule.confidence)


def _torch_benchmark(fn: Callable[[], object], device: Device) -> float:
    from torch.utils.benchmark import Timer as TorchTimer

    # Its documented default use; it synchronizes CUDA around each block of runs.
    min_run_time = 0.2 if device.info.kind == "cuda" else 0.05
    measured = TorchTimer(stmt="fn()", globals={"fn": fn}).blocked_autorange(
        min_run_time=min_run_time
    )
    return measured.median * 1e9


def _median(summary: Summary | None) -> float | None:
    return summary.median_ns if summary else None


def _us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e3:.2f}"


def _delta(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or b is None else f"{100 * abs(a - b) / a:.2f}%"


def render(
    rows: Sequence[Row],
    session: BenchSession,
    datasheet: Peaks | None,
    options: SelfcheckOptions,
    seconds: float,
) -> str:
    """The report as markdown (pure: everything it shows is passed in)."""
    info, sw, rule = session.device.info, session.software, session.resolved.rule
    l2 = f", L2 {info.l2_bytes / 2**20:.0f} MiB" if info.l2_bytes else ""
    lines = [
        "# kernelwatch self-check",
        "",
        f"- device: {info.name} ({info.sm_count or '?'} SMs{l2}), host {info.host}",
        f"- software: driver {sw.driver}, CUDA {sw.cuda}, torch {sw.torch}, Triton {sw.triton}, "
        f"Python {sw.python}, kernelwatch {sw.kernelwatch}",
        f"- our method: {session.method.label()}; stop at >= {rule.min_samples} samples and "
        f">= {rule.min_time_s:g} s, CI half-width <= {100 * rule.target_rel_ci:g}% "
        f"or {rule.budget_s:g} s; warm-up {session.resolved.warmup_s:g} s",
        f"- cases: the middle case of workload `{options.workload}` per kernel, "
        f"{options.dtype}; took {seconds:.0f} s",
        "",
        "## Kernel times (us)",
        "",
        "| kernel | case | ours median | ours 95% CI | n | stop | ours graph (warm) "
        "| do_bench mean | do_bench median | torch.utils.benchmark median | note |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        s = r.ours
        ci = f"{_us(s.ci_low_ns)}-{_us(s.ci_high_ns)}" if s else "n/a"
        lines.append(
            f"| {r.kernel} | {r.case} | {_us(_median(s))} | {ci} | {s.n if s else '-'} "
            f"| {s.stop if s else '-'} | {_us(r.graph_ns)} | {_us(r.do_bench_mean_ns)} "
            f"| {_us(r.do_bench_median_ns)} | {_us(r.torch_benchmark_ns)} | {r.note} |"
        )
    lines += [
        "",
        "## A/A noise (the same kernel measured twice)",
        "",
        "| kernel | ours: median vs median | do_bench: mean vs mean |",
        "|---|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.kernel} | {_delta(_median(r.ours), _median(r.ours_again))} "
            f"| {_delta(r.do_bench_mean_ns, r.do_bench_again_ns)} |"
        )
    lines += ["", "## Ceilings", "", *_ceiling_lines(session.ceilings, datasheet), ""]
    return "\n".join(lines)


def _ceiling_lines(ceilings: Ceilings | None, datasheet: Peaks | None) -> list[str]:
    if ceilings is None:
        return ["not measured"]
    sheet_gbps = datasheet.memory_gbps if datasheet else None
    sheet_tflops = datasheet.tflops.get("bf16") if datasheet else None
    return [
        "| roof | measured | datasheet | measured / datasheet |",
        "|---|---:|---:|---:|",
        _ceiling_row(
            f"copy bandwidth, {ceilings.copy_bytes >> 20} MiB (GB/s)",
            ceilings.copy_gbps,
            sheet_gbps,
        ),
        _ceiling_row(
            f"bf16 GEMM {ceilings.gemm_size}^3 (TFLOP/s)", ceilings.bf16_tflops, sheet_tflops
        ),
    ]


def _ceiling_row(label: str, measured: float, datasheet: float | None) -> str:
    ratio = f"{100 * measured / datasheet:.0f}%" if datasheet else "n/a"
    sheet = f"{datasheet:g}" if datasheet else "n/a"
    return f"| {label} | {measured:.4g} | {sheet} | {ratio} |"
