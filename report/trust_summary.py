"""The GPU self-check's markdown summary (``summary.md``): one pass/fail line per question,
then the numbers behind each. Pure: everything it shows is passed in."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kernelwatch.analysis.trust import Finding


def render(
    findings: Sequence[Finding],
    data: Mapping[str, Mapping[str, Any]],
    stages: Mapping[str, str],
    seconds: float,
    deadline_s: float,
) -> str:
    """The summary as markdown."""
    device = data.get("device") or {}
    info, sw = device.get("device") or {}, device.get("software") or {}
    lines = [f"# kernelwatch GPU self-check: {info.get('name', 'unknown device')}", ""]
    if info:
        l2 = f", L2 {info['l2_bytes'] / 2**20:.0f} MiB" if info.get("l2_bytes") else ""
        lines.append(
            f"- device: {info['name']} (capability {info.get('capability') or '?'}, "
            f"{info.get('sm_count') or '?'} SMs{l2}), host {info.get('host')}"
        )
    if sw:
        names = ("driver", "cuda", "torch", "triton", "python", "kernelwatch")
        lines.append("- software: " + ", ".join(f"{name} {sw.get(name)}" for name in names))
    if device.get("method"):
        rule = device.get("rule") or {}
        lines.append(
            f"- our method: {device['method']}; >= {rule.get('min_samples')} samples, CI "
            f"target {100 * rule.get('target_rel_ci', 0):g}%, budget {rule.get('budget_s')} s"
        )
    lines.append(f"- took {seconds:.0f} s of the {deadline_s:g} s deadline")
    for stage, how in stages.items():
        lines.append(f"  - {stage}: {how}")
    lines += ["", "| question | result | numbers |", "|---|---|---|"]
    for f in findings:
        lines.append(f"| {f.question} | **{f.status.upper()}** | {_cell(f.line)} |")
    for f in findings:
        if f.details:
            lines += ["", f"## {f.question}", ""]
            lines += [f"- {_cell(detail)}" for detail in f.details]
    lines += _agreement_table(data.get("agreement"))
    lines += _flush_lines(data.get("flush"))
    lines += _ceilings_table(data.get("ceilings"))
    lines += _step_table(data.get("trace"))
    return "\n".join(lines) + "\n"


def _step_table(stage: Mapping[str, Any] | None) -> list[str]:
    """The traced decode step as ``kernelwatch serving explain`` would show a serving trace's:
    each kernel of the trace, what it matched, its launches, GPU time and share."""
    if not stage or not stage.get("rows"):
        return []
    lines = [
        "",
        f"## Traced decode step ({stage['steps']} steps, {_us(stage['gpu_ns'])} us of GPU time)",
        "",
        "| trace kernel | kernelwatch kernel | launches | GPU us | share |",
        "|---|---|---:|---:|---:|",
    ]
    for row in stage["rows"]:
        matched = row["kernel"] or "unmatched"
        if row["role"] == "baseline":
            matched += f" (baseline: {row['library']})"
        lines.append(
            f"| {_cell(row['trace'][:80])} | {matched} | {row['launches']} "
            f"| {_us(row['gpu_ns'])} | {100 * row['share']:.1f}% |"
        )
    return lines


def _flush_lines(stage: Mapping[str, Any] | None) -> list[str]:
    """The two L2 flushes on one case: reading leaves L2 clean, zeroing leaves dirty lines
    the timed kernel writes back (nvbench's and do_bench's flush)."""
    if not stage or "read_flush_ns" not in stage:
        return []
    return [
        "",
        "## L2 flush",
        "",
        f"- {stage['kernel']} {stage['case']}: {_us(stage['read_flush_ns'])} us after the "
        f"read flush (ours), {_us(stage['write_flush_ns'])} us after a zeroing flush: "
        f"{100 * stage['difference']:+.1f}% from the dirty lines it leaves",
    ]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _us(ns: float | None) -> str:
    return "n/a" if ns is None else f"{ns / 1e3:.2f}"


def _agreement_table(stage: Mapping[str, Any] | None) -> list[str]:
    if not stage or "rows" not in stage:
        return []
    lines = [
        "",
        "## Kernel times (us)",
        "",
        "| kernel | case | ours median | ours 95% CI | n | stop | ours graph (warm) "
        "| do_bench median | torch.utils.benchmark median |",
        "|---|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for row in stage["rows"]:
        s = row.get("ours")
        ci = f"{_us(s['ci_low_ns'])}-{_us(s['ci_high_ns'])}" if s else "n/a"
        lines.append(
            f"| {row['kernel']} | {row['case']} | {_us(s['median_ns'] if s else None)} | {ci} "
            f"| {s['n'] if s else '-'} | {s['stop'] if s else '-'} | {_us(row.get('graph_ns'))} "
            f"| {_us(row.get('do_bench_ns'))} | {_us(row.get('torch_benchmark_ns'))} |"
        )
    return lines


def _ceilings_table(stage: Mapping[str, Any] | None) -> list[str]:
    if not stage or "copy_bytes" not in stage:
        return []

    def row(label: str, measured: float | None, sheet: float | None) -> str:
        ratio = f"{100 * measured / sheet:.0f}%" if measured and sheet else "n/a"
        shown = "not measured" if measured is None else f"{measured:.4g}"
        return f"| {label} | {shown} | {sheet if sheet else 'n/a'} | {ratio} |"

    lines = [
        "",
        "## Ceilings",
        "",
        "| roof | measured | datasheet | measured / datasheet |",
        "|---|---:|---:|---:|",
        row(
            f"copy bandwidth, {stage['copy_bytes'] >> 20} MiB (GB/s)",
            stage.get("copy_gbps"),
            stage.get("datasheet_gbps"),
        ),
        row(
            f"bf16 GEMM {stage['gemm_size']}^3 (TFLOP/s)",
            stage.get("bf16_tflops"),
            stage.get("datasheet_bf16_tflops"),
        ),
    ]
    lines += [f"- not measured: {_cell(problem)}" for problem in stage.get("problems", ())]
    return lines
