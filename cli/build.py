"""``kernelwatch build`` and ``kernelwatch build-diff``: the per-commit build stage.

Cross-compiles every kernel of a suite for sm_90a and sm_100a (no GPU needed), prints what
the compiler made of each (registers, spills, shared memory, tensor-core path...), and
between two revisions reports static regressions (``analysis/static_diff.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.text import Text

from kernelwatch.analysis.static_diff import Finding, diff_builds, paired_builds
from kernelwatch.analysis.thresholds import StaticThresholds, Thresholds
from kernelwatch.cli.app import app
from kernelwatch.cli.arguments import (
    DtypesOption,
    JsonOption,
    KernelOption,
    RepoOption,
    SrcOption,
    SuiteOption,
    WorkloadOption,
    suite_ref,
)
from kernelwatch.cli.configuration import configuration
from kernelwatch.cli.console import TextTable, fail, output_console, progress, stderr
from kernelwatch.harness.build.archs import DEFAULT_ARCHS, parse_archs
from kernelwatch.harness.build.cache import default_cache_dir
from kernelwatch.harness.build.sass import emulation
from kernelwatch.harness.build.stage import (
    DEFAULT_WORKLOAD,
    BuildFailed,
    BuildRequest,
    BuildResult,
    default_workers,
    run_build,
)
from kernelwatch.harness.isolation.worktree import RevisionError, checkout, top
from kernelwatch.harness.records import BuildMetrics
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef, at_revision, is_file_target

_ARCHS = ",".join(DEFAULT_ARCHS)
ArchOption = Annotated[
    str, typer.Option("--arch", help="Comma-separated targets: sm_90a, sm_100a, sm_80.")
]
WorkersOption = Annotated[
    int | None,
    typer.Option(
        help="Parallel build processes (default: $KERNELWATCH_BUILD_WORKERS, else one per core, "
        "up to 8)."
    ),
]
NoCacheOption = Annotated[
    bool, typer.Option("--no-cache", help="Compile everything; neither read nor fill the cache.")
]


def build(
    rev: Annotated[
        str | None, typer.Option(help="Revision to build (default: the files as they are).")
    ] = None,
    arch: ArchOption = _ARCHS,
    kernel: KernelOption = None,
    dtype: DtypesOption = None,
    workload: WorkloadOption = DEFAULT_WORKLOAD,
    suite: SuiteOption = None,
    repo: RepoOption = None,
    src: SrcOption = None,
    workers: WorkersOption = None,
    no_cache: NoCacheOption = False,
    json_lines: JsonOption = False,
) -> None:
    """Cross-compile every kernel x config x target and report what the compiler produced.

    Exit 0 when everything compiled, 1 when any build failed, 2 on bad input.
    """
    request = _request(arch, kernel, dtype, workload, workers, no_cache)
    result = _build_rev(request, suite_ref(suite, repo, src), rev, "build")
    if json_lines:
        for record in result.records:
            sys.stdout.write(record.dumps() + "\n")
    else:
        _print_builds(result.records)
    counts = Counter(r.status for r in result.records)
    cached = sum(r.cached for r in result.records)
    stderr.print(
        f"build: {counts['ok']} ok, {counts['error']} error, {cached} from cache "
        f"({len(result.records)} builds of suite {result.suite!r})"
    )
    if counts["error"]:
        raise typer.Exit(1)


def build_diff(
    base: Annotated[str, typer.Argument(help="Revision to compare against.")],
    head: Annotated[str, typer.Argument(help="Revision under test.")],
    arch: ArchOption = _ARCHS,
    kernel: KernelOption = None,
    dtype: DtypesOption = None,
    workload: WorkloadOption = DEFAULT_WORKLOAD,
    suite: SuiteOption = None,
    repo: RepoOption = None,
    src: SrcOption = None,
    max_instruction_growth: Annotated[
        float | None,
        typer.Option(
            help="Flag instruction counts up by more than this fraction, for every kernel "
            "(default: max_instruction_growth from kernelwatch.toml, per kernel; "
            f"{StaticThresholds().max_instruction_growth:g} without a file).",
            show_default=False,
        ),
    ] = None,
    workers: WorkersOption = None,
    no_cache: NoCacheOption = False,
    json_lines: JsonOption = False,
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help="Also print the metrics compared, before -> after, per build (with --json: "
            "one build_pair line each).",
        ),
    ] = False,
) -> None:
    """Build BASE and HEAD and report static regressions (spills, lost tensor-core path,
    occupancy cliffs, shared memory over the limit, builds that stopped compiling,
    instruction growth, narrower loads).

    Exit 0 when none, 1 when any regression, 2 on bad input.
    """
    thresholds = configuration().thresholds
    if max_instruction_growth is not None:
        try:
            rules = StaticThresholds(max_instruction_growth=max_instruction_growth)
        except ValueError as exc:
            fail(f"--max-instruction-growth: {exc}", code=2)
        thresholds = Thresholds(static=rules)
    request = _request(arch, kernel, dtype, workload, workers, no_cache)
    ref = suite_ref(suite, repo, src)
    before = _build_rev(request, ref, base, "base")
    after = _build_rev(request, ref, head, "head", fatal_code=1)
    findings = diff_builds(before.records, after.records, thresholds)
    pairs = paired_builds(before.records, after.records) if metrics else []
    if json_lines:
        for finding in findings:
            sys.stdout.write(json.dumps(finding.to_json(), sort_keys=True) + "\n")
        for old, new in pairs:
            pair = {"kind": "build_pair", "before": old.to_json(), "after": new.to_json()}
            sys.stdout.write(json.dumps(pair, sort_keys=True) + "\n")
    else:
        _print_findings(findings)
        if pairs:
            _print_pairs(pairs)
    stderr.print(
        f"build-diff: {len(findings)} static regression(s) in {len(after.records)} builds "
        f"({base} -> {head})"
    )
    if findings:
        raise typer.Exit(1)


def _request(
    arch: str,
    kernel: list[str] | None,
    dtype: list[str] | None,
    workload: str,
    workers: int | None,
    no_cache: bool,
) -> BuildRequest:
    try:
        archs = parse_archs(arch)
        if workers is None:
            workers = default_workers()
    except ValueError as exc:
        fail(str(exc), code=2)
    if workers < 1:
        fail(f"--workers must be at least 1, got {workers}", code=2)
    return BuildRequest(
        archs=archs,
        kernels=tuple(kernel or ()),
        workload=workload,
        dtypes=tuple(dtype or ()),
        cache_dir=None if no_cache else str(default_cache_dir()),
        workers=workers,
    )


def _build_rev(
    request: BuildRequest,
    suite: SuiteRef,
    rev: str | None,
    label: str,
    fatal_code: int = 2,
) -> BuildResult:
    """Build ``rev`` of the suite (the files on disk when None). A suite that cannot be
    loaded exits ``fatal_code``: bad input at the base, a regression at the head."""
    try:
        with _suite_at(suite, rev) as ref, progress() as bar_ui:
            bar = bar_ui.add_task(f"{label}: importing the suite", total=None)

            def on_plan(n: int) -> None:
                bar_ui.update(bar, total=n, description=f"{label}: compiling")

            def on_record(record: BuildMetrics) -> None:
                bar_ui.update(bar, advance=1, description=f"{label}: {record.kernel}")

            return run_build(dataclasses.replace(request, suite=ref), on_plan, on_record)
    except RevisionError as exc:
        fail(str(exc), code=2)
    except BuildFailed as exc:
        where = f"{label} ({rev})" if rev else label
        fail(f"{where}: {exc}", code=fatal_code)


@contextlib.contextmanager
def _suite_at(suite: SuiteRef, rev: str | None) -> Iterator[SuiteRef]:
    """The suite reference to build: from a worktree of ``rev`` when one is given, where a
    suite file inside the repository is that revision's. A ``--repo`` below the top of its
    git repository (``checkout/src``) stands for the same place in the worktree."""
    if rev is None:
        yield suite
        return
    if suite.root is None and suite.target != BUILTIN_SUITE:
        raise RevisionError(f"--rev needs --repo: which repository is {suite.target!r} in?")
    root = Path(suite.root) if suite.root else _kernelwatch_repo()
    repository = top(root)
    with checkout(repository, rev) as tree:
        ref = at_revision(dataclasses.replace(suite, root=str(root)), repository, tree.path)
        yield _uncommitted(ref, repository, tree.path, rev)


def _uncommitted(ref: SuiteRef, repository: Path, tree: Path, rev: str) -> SuiteRef:
    """``ref``, or the working tree's copy of its suite file when ``rev`` lacks the file and
    the working tree has it (the suite ``init`` just wrote, not committed yet): the same file
    then serves every revision, said in one line."""
    target = Path(ref.target)
    if not is_file_target(ref.target) or target.is_absolute() or (tree / target).is_file():
        return ref
    working = repository / target
    if not working.is_file():
        return ref
    stderr.print(f"{target} is not committed at {rev}: using the working tree's copy")
    return dataclasses.replace(ref, target=str(working.resolve()))


def _kernelwatch_repo() -> Path:
    """The checkout this kernelwatch runs from (found without importing the kernels)."""
    spec = importlib.util.find_spec(BUILTIN_SUITE)
    assert spec is not None and spec.submodule_search_locations is not None
    return Path(next(iter(spec.submodule_search_locations))).parent


def _console() -> Console:
    return output_console(200)


def _print_builds(records: list[BuildMetrics]) -> None:
    table = TextTable(title="build")
    columns = ("kernel", "function", "dtype", "arch", "config", "case", "regs", "spill st/ld B")
    columns += ("smem st+dyn B", "tensor core", "ld bits", "instr", "status")
    for column in columns:
        table.add_column(column, overflow="fold")
    for r in records:
        status = "cached" if r.cached else r.status
        if r.status != "ok":
            status = Text.assemble(("error", "bold red"), f" {r.reason}")
        elif note := emulation(r.dtype, r.tensor_core):
            status = f"{status}, {note}"
        table.add_row(
            r.kernel,
            r.function,
            r.dtype,
            r.arch,
            r.config.label() if r.config else "-",
            r.case,
            _n(r.registers),
            f"{_n(r.spill_store_bytes)}/{_n(r.spill_load_bytes)}",
            f"{_n(r.shared_static_bytes)}+{_n(r.shared_dynamic_bytes)}",
            r.tensor_core or "-",
            _n(r.global_load_bits),
            _n(r.instructions),
            status,
        )
    _console().print(table)


def _print_findings(findings: list[Finding]) -> None:
    table = TextTable(title="static regressions")
    for column in ("rule", "kernel", "function", "dtype", "arch", "config", "case", "before"):
        table.add_column(column, overflow="fold")
    table.add_column("after", overflow="fold")
    table.add_column("what", overflow="fold")
    for f in findings:
        table.add_row(
            f.rule,
            f.kernel,
            f.function,
            f.dtype,
            f.arch,
            f.config,
            f.case,
            f.before,
            Text(str(f.after), style="bold red"),
            f.message,
        )
    _console().print(table)


#: What ``build-diff --metrics`` shows of each build, by column.
_COMPARED: tuple[tuple[str, Callable[[BuildMetrics], object]], ...] = (
    ("config", lambda r: r.config.label() if r.config else "-"),
    ("regs", lambda r: _n(r.registers)),
    ("spill st/ld B", lambda r: f"{_n(r.spill_store_bytes)}/{_n(r.spill_load_bytes)}"),
    ("smem st+dyn B", lambda r: f"{_n(r.shared_static_bytes)}+{_n(r.shared_dynamic_bytes)}"),
    ("tensor core", lambda r: r.tensor_core or "-"),
    ("ld bits", lambda r: _n(r.global_load_bits)),
    ("instr", lambda r: _n(r.instructions)),
)


def _print_pairs(pairs: list[tuple[BuildMetrics, BuildMetrics]]) -> None:
    table = TextTable(title="builds compared (before -> after)")
    for column in ("kernel", "function", "dtype", "arch", "case", *(c for c, _ in _COMPARED)):
        table.add_column(column, overflow="fold")
    for old, new in pairs:
        cells = []
        for _, metric in _COMPARED:
            was, now = str(metric(old)), str(metric(new))
            cells.append(was if was == now else f"{was} -> {now}")
        table.add_row(new.kernel, new.function, new.dtype, new.arch, new.case, *cells)
    _console().print(table)


def _n(value: int | None) -> str:
    return "-" if value is None else str(value)


app.command("build")(build)
app.command("build-diff")(build_diff)
