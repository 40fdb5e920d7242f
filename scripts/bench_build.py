"""Benchmark the build stage: the built-in suite cold for two targets, the same commit again
(all from the cache), and a commit that changes one kernel.

    .venv/bin/python scripts/bench_build.py [--workers N] [--arch sm_90a,sm_100a] [--json FILE]

The suite is copied into a temporary git repository (two commits: as it is, then softmax
edited), built from worktrees exactly as ``kernelwatch build --rev`` does, into a fresh
cache. Prints a Markdown table: wall time, builds compiled and served from the cache (or
its memo, harness/build/memo.py); ``--json`` writes the figures that docs/BENCHMARKS.md's
table is rendered from (scripts/docs_results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from kernelwatch.harness.build.archs import DEFAULT_ARCHS, parse_archs
from kernelwatch.harness.build.stage import BuildRequest, BuildResult, default_workers, run_build
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef

KERNELS = Path(__file__).resolve().parent.parent / "kernels"
# A real change to one kernel's code: softmax's exponent goes through exp2.
EDIT = (
    "num = tl.exp(x - tl.max(x, axis=0))",
    "num = tl.exp2((x - tl.max(x, axis=0)) * 1.4426950408889634)",
)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com", *args],
        cwd=repo,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def make_repo(root: Path) -> tuple[Path, str, str]:
    repo = root / "suite"
    shutil.copytree(KERNELS, repo / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "suite as it is")
    first = git(repo, "rev-parse", "HEAD")
    softmax = repo / "kernels" / "softmax.py"
    text = softmax.read_text()
    if EDIT[0] not in text:
        sys.exit("error: kernels/softmax.py changed; update EDIT in scripts/bench_build.py")
    softmax.write_text(text.replace(*EDIT))
    git(repo, "commit", "-qam", "softmax: exp2")
    return repo, first, git(repo, "rev-parse", "HEAD")


def timed_build(repo: Path, rev: str, request: BuildRequest) -> tuple[BuildResult, float]:
    """The build of ``rev`` and its wall time. (Not its CPU time: the build children are
    forks of a preload server that outlives the build, which ``RUSAGE_CHILDREN`` misses.)"""
    start = time.perf_counter()
    with checkout(repo, rev) as tree:
        result = run_build(replace(request, suite=SuiteRef(BUILTIN_SUITE, str(tree.path))))
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--arch", default=",".join(DEFAULT_ARCHS))
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernelwatch-bench-") as tmp:
        repo, first, second = make_repo(Path(tmp))
        request = BuildRequest(
            archs=parse_archs(args.arch), cache_dir=str(Path(tmp) / "cache"), workers=args.workers
        )
        rows = []
        for label, rev in (
            ("cold", first),
            ("same commit again", first),
            ("softmax changed", second),
        ):
            result, wall = timed_build(repo, rev, request)
            errors = sum(r.status != "ok" for r in result.records)
            cached = sum(r.cached for r in result.records)
            compiled = len(result.records) - cached
            rows.append((label, len(result.records), compiled, cached, errors, wall))
            print(f"{label}: {wall:.1f} s", file=sys.stderr)
    load = os.getloadavg()
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"{args.workers} build processes, targets {args.arch}; load average at the end "
        f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}\n"
    )
    print("| build | builds | compiled | from cache | errors | wall s |")
    print("|---|---:|---:|---:|---:|---:|")
    for label, n, compiled, cached, errors, wall in rows:
        print(f"| {label} | {n} | {compiled} | {cached} | {errors} | {wall:.1f} |")
    if args.json:
        names = ("builds", "compiled", "cached", "errors", "wall_s")
        figures = {
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "workers": args.workers,
            "archs": args.arch,
            "load_at_end": [round(x, 1) for x in load],
            "rows": {row[0]: dict(zip(names, [*row[1:5], round(row[5], 1)], strict=True))
                     for row in rows},
        }  # fmt: skip
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
