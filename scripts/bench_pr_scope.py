"""Benchmark what a PR check times: the device seconds of a full check of the built-in suite
against a check of a head that changes one kernel and of one that changes only docs.

    .venv/bin/python scripts/bench_pr_scope.py [--arch sm_90a] [--json FILE] [--cache DIR]

The suite is copied into a temporary git repository (base: as it is; ``docs``: a README
added; ``one kernel``: softmax's exponent through exp2, ``bench_build.py``'s edit).
For each head, both commits are built with their recipes as ``pr_check`` builds them (every
dtype the timing stage runs; into a cache of the benchmark's own, which a pull request's
builds would only read), the kernels to time chosen by ``flows/prcheck.py``'s own rule, and
those timed by the A/B stage, interleaved; the full check times every kernel of the same
pair. Device seconds are the A/B records' own ``duration_s`` (the time cases held the
device). In the CPU interpreter the times are the interpreter's; the ratios are what the
table is for.
Prints a Markdown table for docs/BENCHMARKS.md and writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_build import EDIT, KERNELS, git

from kernelwatch.analysis.build_identity import identical
from kernelwatch.config.settings import RepositoryConfig
from kernelwatch.flows import pipeline
from kernelwatch.flows.prcheck import changed
from kernelwatch.flows.repos import declared_environment
from kernelwatch.harness.build.archs import parse_archs
from kernelwatch.harness.build.stage import BuildRequest, BuildResult, run_build
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.records import CaseId
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef
from kernelwatch.harness.timing.request import BenchOptions

#: The tests' timing: the child's CPU time, a fixed budget per case, no baseline.
OPTIONS = BenchOptions(timer="cpu-process-time", budget_s=0.3)
CASE_TIMEOUT_S = 600.0


def commit(repo: Path, message: str) -> str:
    git(repo, "add", ".")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def make_repo(root: Path) -> tuple[Path, dict[str, str]]:
    """The repository and its commits: base, a docs-only head, a one-kernel head (each on
    top of the base)."""
    repo = root / "suite"
    shutil.copytree(KERNELS, repo / "kernels", ignore=shutil.ignore_patterns("__pycache__"))
    git(repo, "init", "-q", "-b", "main")
    shas = {"base": commit(repo, "suite as it is")}
    (repo / "README.md").write_text("# kernels\n\nHow to run the suite: `kernelwatch check`.\n")
    shas["docs"] = commit(repo, "docs: a README")
    git(repo, "checkout", "-q", shas["base"])
    softmax = repo / "kernels" / "softmax.py"
    text = softmax.read_text()
    if EDIT[0] not in text:
        sys.exit("error: kernels/softmax.py changed; update EDIT in scripts/bench_pr_scope.py")
    softmax.write_text(text.replace(EDIT[0], EDIT[1]))
    shas["one kernel"] = commit(repo, "softmax: exp2")
    return repo, shas


def build(repo: RepositoryConfig, tree: Path, cache: Path) -> BuildResult:
    """Every kernel of the suite at ``tree``, with its recipes, as a PR check builds it."""
    request = BuildRequest(
        SuiteRef(BUILTIN_SUITE, str(tree)),
        archs=repo.archs,
        workload=repo.workload,
        every_dtype=True,
        cache_dir=str(cache),
    )
    return run_build(request)


def measure(
    repo: RepositoryConfig, path: Path, cache: Path, base: str, head: str, full: bool
) -> dict:
    """One check of ``head`` against ``base``: what it built, what it timed, and the device
    seconds its A/B held."""
    with checkout(path, base) as a, checkout(path, head) as b:
        start = time.perf_counter()
        built_a, built_b = build(repo, a.path, cache), build(repo, b.path, cache)
        build_s = time.perf_counter() - start
        declared_a, declared_b = (declared_environment(path, sha, repo.environment_files)
                                  for sha in (base, head))  # fmt: skip
        ids_a = pipeline.case_identities(repo, built_a, declared_a)
        ids_b = pipeline.case_identities(repo, built_b, declared_b)
        same = frozenset() if full else identical(ids_a, ids_b)
        cases = [CaseId(r.suite, r.kernel, r.workload, r.params, r.dtype) for r in built_b.recipes]
        kernels = tuple(dict.fromkeys(c.kernel for c in cases))
        timed = changed(kernels, cases, same)
        pairs = pipeline.ab_stage(repo, a.path, b.path, timed, OPTIONS, CASE_TIMEOUT_S)
    return {
        "kernels": len(kernels),
        "kernels_timed": len(timed),
        "timed": list(timed),
        "cases_timed": sum(1 for p in pairs if p.status == "ok"),
        "cases_identical": len(same),
        "device_s": round(sum(p.duration_s for p in pairs), 2),
        "build_s": round(build_s, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90a", help="targets to build (default sm_90a)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--cache", type=Path, help="the build cache (default: a new one)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kw-pr-scope-") as tmp:
        path, shas = make_repo(Path(tmp))
        repo = RepositoryConfig(name="builtin", source=str(path), suite=BUILTIN_SUITE,
                                workload="smoke", archs=parse_archs(args.arch))  # fmt: skip
        cache = args.cache or Path(tmp) / "cache"
        rows = {
            "full check (--all)": measure(repo, path, cache, shas["base"], shas["one kernel"],
                                          True),
            "one kernel changed": measure(repo, path, cache, shas["base"], shas["one kernel"],
                                          False),
            "docs only": measure(repo, path, cache, shas["base"], shas["docs"], False),
        }  # fmt: skip
    full = rows["full check (--all)"]["device_s"]
    print(f"{platform.node()}: {args.arch}, smoke workload, {OPTIONS.timer}, budget 0.3 s/case\n")
    print("| check | kernels timed | cases timed | cases identical | device s | of full |")
    print("|---|---|---|---|---|---|")
    for name, row in rows.items():
        share = row["device_s"] / full if full else 0.0
        print(f"| {name} | {row['kernels_timed']} of {row['kernels']} | {row['cases_timed']} "
              f"| {row['cases_identical']} | {row['device_s']:.1f} | {share:.1%} |")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"arch": args.arch, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
