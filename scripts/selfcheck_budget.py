"""The GPU self-check's time budget, stage by stage, for one H200: what each stage compiles and
autotunes (counted here by cross-compiling the built-in suite for sm_90a with
``kernelwatch build``, whose compile times are this machine's) and how long its sampling and
child start-ups take (from the stage's options and the FLOP/byte model at the datasheet's
roofs). Writes docs/results/selfcheck_budget.json, which docs/TIMING.md's budget table is
rendered from (scripts/docs_results.py) and tests/test_selfcheck_stages.py holds the stage
shares and the script's limit to.

The self-check's stages share one Triton cache (harness/selfcheck/stages.py), so a binary an
earlier stage compiled costs a later one nothing; only the first A/A process autotunes (the
others launch its configs). What is estimated, not measured, is named in ``ASSUMED``.

Usage: scripts/selfcheck_budget.py [--out docs/results/selfcheck_budget.json]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelwatch.harness.build.plan import Job, plan_builds
from kernelwatch.harness.records import LaunchConfig
from kernelwatch.harness.selfcheck.measure import TRACE_STEPS, TRACE_WORKLOAD, step_case
from kernelwatch.harness.selfcheck.stages import STAGES, SelfcheckPlan
from kernelwatch.harness.spec import KernelSpec, Params, Suite
from kernelwatch.harness.suite import SuiteRef, load_suite, spread
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.roofline import ELEMENT_BYTES, datasheet_peaks

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-selfcheck.sh"
ARCH = "sm_90a"
DEVICE = "NVIDIA H200"

#: What this script cannot measure without a GPU, with where each figure comes from.
ASSUMED = {
    # Creating the CUDA context and torch's first allocations in a fresh child.
    "cuda_init_s": 2.0,
    # Triton's autotuner benchmarks each config with do_bench(warmup=25 ms, rep=100 ms).
    "autotune_config_s": 0.125,
    # triton.testing.do_bench at its defaults (25 ms warm-up, 100 ms of repeats).
    "do_bench_s": 0.125,
    # torch.utils.benchmark's blocked_autorange(min_run_time=0.2): 0.2 s and a last block.
    "torch_benchmark_s": 0.3,
    # A correctness case: the fp64 reference, the launch, the determinism rerun.
    "check_case_s": 0.05,
    # ncu attaching, instrumenting and replaying its 20 profiled launches.
    "ncu_overhead_s": 25.0,
    # torch.profiler's traced step: Kineto and CUPTI starting, the Chrome trace exported and
    # read back (a few hundred kernel events).
    "profiler_s": 5.0,
    # The spin before each sample (timers.MIN_BACKLOG_NS) and the L2 flush of 2 x 50 MiB.
    "sample_overhead_s": 50e-6 + 2 * 50 * 2**20 / 3.3e12,
}


def build_records(workload: str, dtype: str, keep: Path | None) -> list[dict[str, Any]]:
    """Every build of ``workload``'s cases in ``dtype`` for ``ARCH``, compiled afresh (or
    read back from ``keep``, where an earlier run of this script left them)."""
    kept = keep / f"builds-{workload}-{dtype}.jsonl" if keep else None
    if kept and kept.exists():
        return [json.loads(line) for line in kept.read_text().splitlines()]
    command = [sys.executable, "-m", "kernelwatch.cli", "build", "--arch", ARCH, "--workload",
               workload, "--dtype", dtype, "--json", "--no-cache", "--workers", "1"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if not records:
        raise SystemExit(f"selfcheck_budget: kernelwatch build gave nothing: {done.stderr[-500:]}")
    builds = [r for r in records if r.get("kind") == "build"]
    if kept:
        kept.write_text("".join(json.dumps(r) + "\n" for r in builds))
    return builds


def startup_s() -> float:
    """A fresh child's imports, measured here (torch, Triton, the built-in suite)."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, triton, kernelwatch.kernels"],
                   check=True, cwd=ROOT)  # fmt: skip
    return time.perf_counter() - began


def model_s(spec: KernelSpec, params: Params, dtype: str) -> float:
    """The case's time at the datasheet's roofs (its longer roof)."""
    peaks = datasheet_peaks(DEVICE)
    assert peaks is not None and peaks.memory_gbps
    flops = spec.flops(params)
    tflops = peaks.tflops.get(dtype) or peaks.tflops["bf16"]
    return max(flops / (tflops * 1e12), spec.min_bytes(params, ELEMENT_BYTES[dtype]) / (
        peaks.memory_gbps * 1e9))  # fmt: skip


def sampling_s(options: BenchOptions, per_sample_s: float) -> float:
    """One collection at ``options``: warm-up, cool-down and the longer of the budget and the
    minimum samples (the budget ends sampling once the minimum is met)."""
    resolved = options.resolved("cuda")
    needed = options.min_samples * (per_sample_s + ASSUMED["sample_overhead_s"])
    return resolved.warmup_s + resolved.cool_down_s + max(resolved.rule.budget_s, needed)


def _key(job: Job) -> str:
    return repr((job.kernel, job.dtype, job.config, job.launch.identity()))


class Compiles:
    """The binaries compiled so far in the self-check's shared Triton cache: each distinct
    (kernel, dtype, config, specialisation) the build planner finds for a stage's cases,
    with the compile time ``kernelwatch build`` measured for it here."""

    def __init__(self, suite: Suite, dtype: str, records: Iterable[dict[str, Any]]) -> None:
        self.suite, self.dtype = suite, dtype
        self.seconds: dict[str, float] = {}
        measured = {(r["kernel"], r["case"], r["function"], _config(r.get("config"))):
                    r.get("compile_s") or 0.0 for r in records if r["status"] == "ok"}  # fmt: skip
        for workload in {r["workload"] for r in records}:
            for job in self._jobs(workload, None):
                found = (job.kernel, job.case, job.launch.function,
                         job.config.label() if job.config else None)  # fmt: skip
                if found in measured:
                    self.seconds[_key(job)] = measured[found]
        self.seen: set[str] = set()

    def _jobs(self, workload: str, cases: dict[str, list[Params]] | None) -> list[Job]:
        specs = [s for s in self.suite.kernels if isinstance(s, KernelSpec)]
        if cases is not None:
            specs = [replace(s, workloads={workload: tuple(cases[s.name])}) for s in specs
                     if s.name in cases]  # fmt: skip
        return plan_builds(replace(self.suite, kernels=tuple(specs)), [], workload,
                           [self.dtype], [ARCH]).jobs  # fmt: skip

    def take(
        self, workload: str, cases: Sequence[tuple[KernelSpec, Params]], autotune: bool = True
    ) -> dict[str, float]:
        """What compiling ``cases`` adds to what the cache holds, and autotuning them unless
        they launch their spec's pinned config."""
        chosen: dict[str, list[Params]] = {}
        for spec, params in cases:
            chosen.setdefault(spec.name, []).append(params)
        pinned = {s.name: s.pinned_config for s, _ in cases if s.configs}
        compiles, compile_s = 0, 0.0
        for job in self._jobs(workload, chosen):
            if not autotune and job.kernel in pinned and job.config != pinned[job.kernel]:
                continue
            key = _key(job)
            if key not in self.seen:
                self.seen.add(key)
                compiles += 1
                compile_s += self.seconds.get(key, 0.0)
        runs = sum(len(s.configs) for s, _ in cases if autotune and len(s.configs) > 1)
        return {"compiles": compiles, "compile_s": compile_s, "autotune_runs": runs,
                "autotune_s": runs * ASSUMED["autotune_config_s"]}  # fmt: skip


def _config(data: dict[str, Any] | None) -> str | None:
    return LaunchConfig.from_json(data).label() if data else None


def cases_of(
    specs: Sequence[KernelSpec], workload: str, count: int
) -> list[tuple[KernelSpec, Params]]:
    return [(s, p) for s in specs if workload in s.workloads
            for p in spread(s.workloads[workload], count)]  # fmt: skip


def stage_rows(plan: SelfcheckPlan, records: list[dict[str, Any]],
               start_s: float) -> list[dict[str, Any]]:  # fmt: skip
    suite = load_suite(SuiteRef())
    options = plan.options
    dtype = options.dtype
    specs = [s for s in suite.kernels if isinstance(s, KernelSpec) and dtype in s.dtypes]
    timed = [s for s in specs if options.workload in s.workloads]
    compiles = Compiles(suite, dtype, records)
    child_s = start_s + ASSUMED["cuda_init_s"]
    rows = []

    # measurements: granularity, ceilings, %SOL, the two flushes, agreement (4 tools a row).
    agreement = cases_of(timed, options.workload, 1)
    bench = options.bench
    one = sampling_s(bench, 0.0)
    tools_s = ASSUMED["do_bench_s"] + ASSUMED["torch_benchmark_s"]
    rows_s = sum(2 * sampling_s(bench, model_s(s, p, dtype)) + tools_s for s, p in agreement)
    first, first_case = timed[0], timed[0].workloads[options.workload][0]
    granularity_s = 200 * (model_s(first, first_case, dtype) + ASSUMED["sample_overhead_s"]) + one
    sol = next(s for s in timed if s.name == options.sol_kernel)
    sol_s = sampling_s(bench, model_s(sol, options.sol_case, dtype))
    launched = [(first, first_case), (sol, options.sol_case), *agreement]
    work = compiles.take(options.workload, launched)
    # The traced step: each kernel's decode case (compiled and tuned here) or, for one with
    # no decode workload, its case of the workload; a warm and an observed launch each, then
    # TRACE_STEPS steps under the profiler.
    step = [(spec, *case) for spec in specs
            if (case := step_case(spec, options.workload)) is not None]  # fmt: skip
    decode = [(spec, params) for spec, workload, params in step if workload == TRACE_WORKLOAD]
    trace_s = ASSUMED["profiler_s"] + (2 + TRACE_STEPS) * sum(
        model_s(s, p, dtype) + ASSUMED["sample_overhead_s"] for s, _, p in step
    )
    for key, value in compiles.take(TRACE_WORKLOAD, decode).items():
        work[key] += value
    # The ceilings' two collections, %SOL, and the flush comparison's two (an upper bound:
    # it times a smaller case).
    sample_s = granularity_s + 2 * one + 3 * sol_s + rows_s + trace_s
    rows.append({"stage": "measurements", "cases": len(agreement) + 3 + len(decode),
                 "processes": 1, **work, "startup_s": child_s, "sampling_s": sample_s})  # fmt: skip

    # correctness: every smoke case in the dtype, at the kernels' pinned configs, and those
    # of the kernels in the plan's other dtypes (FP4).
    checks = cases_of(specs, plan.check_workload, 0)
    work = compiles.take(plan.check_workload, checks, autotune=False)
    for other in plan.check_dtypes:
        own = [s for s in suite.kernels if isinstance(s, KernelSpec) and other in s.dtypes]
        extra = cases_of(own, plan.check_workload, 0)
        more = Compiles(suite, other, records).take(plan.check_workload, extra, autotune=False)
        work = {k: work[k] + more[k] for k in work}
        checks += extra
    check_s = len(checks) * ASSUMED["check_case_s"]
    rows.append({"stage": "correctness", "cases": len(checks), "processes": 1, **work,
                 "startup_s": child_s, "sampling_s": check_s})  # fmt: skip

    # aa: the first process compiles and autotunes; every process samples every case.
    aa = cases_of(timed, options.workload, plan.aa_cases_per_kernel)
    work = compiles.take(options.workload, aa)
    per_process = sum(sampling_s(plan.aa_options, model_s(s, p, dtype)) for s, p in aa)
    rows.append({"stage": "aa", "cases": len(aa), "processes": plan.aa_processes, **work,
                 "startup_s": plan.aa_processes * child_s,
                 "sampling_s": plan.aa_processes * per_process})  # fmt: skip

    # ncu: the %SOL case in a run of its own under the profiler.
    rows.append({"stage": "ncu", "cases": 1, "processes": 1, "compiles": 0, "compile_s": 0.0,
                 "autotune_runs": 0, "autotune_s": 0.0, "startup_s": child_s,
                 "sampling_s": ASSUMED["ncu_overhead_s"]})  # fmt: skip
    shares = dict(STAGES)
    scale = plan.deadline_s / sum(shares.values())
    for row in rows:
        row["total_s"] = row["compile_s"] + row["autotune_s"] + row["startup_s"] + row["sampling_s"]
        row["share_s"] = shares[row["stage"]] * scale
        for key, value in row.items():
            if isinstance(value, float):
                row[key] = round(value, 1)
    return rows


def script_limit_s() -> int:
    """The hard limit gpu-selfcheck.sh sets (``limit=``)."""
    found = re.search(r"^limit=(\d+)$", SCRIPT.read_text(), re.MULTILINE)
    assert found, "gpu-selfcheck.sh sets limit="
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "docs" / "results" / "selfcheck_budget.json"
    )
    parser.add_argument("--keep", type=Path, help="keep the build records here, and reuse them")
    args = parser.parse_args()
    plan = SelfcheckPlan()
    began = time.perf_counter()
    workloads = (plan.options.workload, plan.check_workload, TRACE_WORKLOAD)
    builds = {w: build_records(w, plan.options.dtype, args.keep) for w in workloads}
    for dtype in plan.check_dtypes:
        builds[f"{plan.check_workload} {dtype}"] = build_records(
            plan.check_workload, dtype, args.keep
        )
    rows = stage_rows(plan, [r for records in builds.values() for r in records], startup_s())
    import triton

    details = {
        "arch": ARCH,
        "device": DEVICE,
        "triton": triton.__version__,
        "builds": {w: len(records) for w, records in builds.items()},
        "assumed": ASSUMED,
        "deadline_s": plan.deadline_s,
        "script_limit_s": script_limit_s(),
        "stages": rows,
        "total_s": round(sum(r["total_s"] for r in rows), 1),
        "measured_in_s": round(time.perf_counter() - began),
    }
    args.out.write_text(json.dumps(details, indent=1) + "\n")
    print(f"selfcheck_budget: {details['total_s']} s of {plan.deadline_s:g} s; wrote {args.out}")


if __name__ == "__main__":
    main()
