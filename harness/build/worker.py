"""The child process of the build stage: ``python -m kernelwatch.harness.build.worker``.

Kernel code is imported only here, as in ``isolation/kernel_child.py``: an import error, a
compiler crash or a hang costs this process, and the parent (``stage.py``) records it.

Protocol: a JSON plan on stdin (``BuildRequest.plan``); JSON lines on stdout:
``{"event": "plan", "suite": NAME, "tasks": N}``, then for each task this worker owns
(see ``main``, minus ``skip``) ``{"event": "begin", "task": i, "record": {...}}``
(the record's identity, for the parent to report if this process dies) and
``{"event": "result", "task": i, "record": {...}}``. Worker 0 also sends every case's
recipe, once, after the plan: ``{"event": "recipes", "recipes": [{...}, ...]}``. The build
cache is the parent's, and only with the memo on: the worker asks ``{"event": "lookup",
"key": K, "kernel": N}`` and reads ``{"record": {...} | null}`` on its stdin, and offers a
fresh build with ``{"event": "store", "key": K, "kernel": N, "record": {...}}``; the parent
binds ``K`` to kernel ``N``'s source as it read it (``memo.Recall.bound``).
With ``"memo": true`` in the plan, the worker first names the suite's kernels and the files
their spec code lives in, ``{"event": "kernels", "kernels": [{"name": N, "files": [...]}]}``,
and reads ``{"held": [N, ...]}``: the kernels the parent's memo already holds
(``memo.py``), which it then neither records nor builds.
A suite that cannot be imported ends with ``{"event": "fatal", "message": "..."}``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib.util
import inspect
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from kernelwatch.harness.isolation.kernel_child import EXIT_FATAL, Emit, open_channel
from kernelwatch.harness.isolation.quick_exit import quick_exit
from kernelwatch.harness.records import BuildMetrics
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteLoadError, SuiteRef, load_suite


def main() -> int:
    """Plan, then build this worker's share; see the module docstring for the protocol."""
    emit, plan = open_channel()
    faulthandler.enable()

    try:
        suite = _load(SuiteRef.from_json(plan["suite"]))
    except SuiteLoadError as exc:
        emit({"event": "fatal", "message": str(exc)})
        return EXIT_FATAL

    from kernelwatch.harness.build.compiler import build
    from kernelwatch.harness.build.plan import plan_builds
    from kernelwatch.harness.spec import DTYPES

    unknown = [k for k in plan["kernels"] if k not in suite.names]
    if unknown:
        valid = ", ".join(suite.names)
        emit(
            {"event": "fatal", "message": f"unknown kernel {unknown[0]!r}; valid kernels: {valid}"}
        )
        return EXIT_FATAL
    bad = [d for d in plan["dtypes"] if d not in DTYPES]
    if bad:
        emit({"event": "fatal", "message": f"unknown dtype {bad[0]!r}; valid: {', '.join(DTYPES)}"})
        return EXIT_FATAL
    kernels = list(plan["kernels"])
    if plan.get("memo"):
        # The parent answers from its memo with the kernels it already holds (memo.py).
        named_kernels = [s for s in suite.kernels if not kernels or s.name in kernels]
        claims = [{"name": s.name, "files": spec_files(s)} for s in named_kernels]
        emit({"event": "kernels", "kernels": claims})
        held = set(json.loads(sys.stdin.readline() or "{}").get("held", []))
        kernels = [s.name for s in named_kernels if s.name not in held]
        if not kernels:
            emit({"event": "plan", "suite": suite.name, "tasks": 0})
            if plan["worker"] == 0:
                emit({"event": "recipes", "recipes": []})
            return 0
    jobs, failures, recipes = plan_builds(
        suite,
        kernels,
        plan["workload"],
        plan["dtypes"],
        plan["archs"],
        plan.get("every_dtype", False),
    )
    tasks: list[Any] = [*failures, *jobs]
    emit({"event": "plan", "suite": suite.name, "tasks": len(tasks)})
    if plan["worker"] == 0:
        emit({"event": "recipes", "recipes": [r.to_json() for r in recipes]})
    cache = plan["cache"] and plan.get("memo")  # the parent keys the cache by the memo's tree
    skip = set(plan["skip"])
    families = {spec.name: spec.family for spec in suite.kernels}

    def named(record: BuildMetrics) -> dict[str, Any]:
        """``record`` as JSON, in its kernel's family as the spec declares it (a cached
        record was built before the spec may have changed it)."""
        return replace(record, family=families[record.kernel]).to_json()

    for index in range(len(tasks)):
        # Both targets of one launch go to one worker and neighbouring launches (of similar
        # cost: configs of one kernel) to different ones, which keeps the workers balanced.
        if index // len(plan["archs"]) % plan["workers"] != plan["worker"] or index in skip:
            continue
        task = tasks[index]
        if isinstance(task, BuildMetrics):
            emit({"event": "result", "task": index, "record": named(task)})
            continue
        emit({"event": "begin", "task": index, "record": named(task.skeleton(suite.name))})
        record = build(task, suite.name, ParentCache(emit, task.kernel) if cache else None)
        emit({"event": "result", "task": index, "record": named(record)})
    return 0


def spec_files(spec: Any) -> list[str]:
    """The files ``spec``'s code lives in: each of its functions' and each module that holds
    the spec itself. The parent keys the kernel's memo entry by these files' contents and the
    modules they import (``memo.py``)."""
    functions = [getattr(spec, name, None) for name in
                 ("make_inputs", "make_outputs", "launch", "call", "reference", "flops",
                  "min_bytes")]  # fmt: skip
    functions.append(getattr(getattr(spec, "baseline", None), "fn", None))
    files = set()
    for function in functions:
        if function is None:
            continue
        with contextlib.suppress(TypeError, ValueError):
            file = inspect.getsourcefile(inspect.unwrap(function))
            if file:
                files.add(file)
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        library = not file or file.startswith(_LIBRARY_PREFIXES)
        if not library and any(value is spec for value in list(vars(module).values())):
            files.add(file)
    return sorted(files)


#: Where installed libraries live: their modules are not searched for a suite's specs.
_LIBRARY_PREFIXES = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})


class ParentCache:
    """The build cache as this process sees it: through the parent, which alone reads and
    writes the files (kernel code here can neither read another run's entries nor plant
    one; the parent stores only what a trusted run built)."""

    def __init__(self, emit: Emit, kernel: str) -> None:
        self._emit = emit
        self._kernel = kernel

    def get(self, key: str) -> BuildMetrics | None:
        self._emit({"event": "lookup", "key": key, "kernel": self._kernel})
        answer = json.loads(sys.stdin.readline() or "{}").get("record")
        return BuildMetrics.from_json(answer) if answer else None

    def put(self, key: str, record: BuildMetrics) -> None:
        record_json = record.to_json()
        self._emit({"event": "store", "key": key, "kernel": self._kernel, "record": record_json})


def _load(ref: SuiteRef) -> Any:
    """Import the suite. The built-in suite at another checkout is imported from that
    checkout's ``kernels/`` while the platform stays this one (so old commits are built by
    the current harness)."""
    if ref.target == BUILTIN_SUITE and ref.root is not None:
        package = Path(ref.root) / "kernels"
        spec = importlib.util.spec_from_file_location(
            BUILTIN_SUITE, package / "__init__.py", submodule_search_locations=[str(package)]
        )
        if spec is None or spec.loader is None:
            raise SuiteLoadError(f"{package} is not a Python package")
        module = importlib.util.module_from_spec(spec)
        sys.modules[BUILTIN_SUITE] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # that commit's import error is that commit's failure
            first = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
            raise SuiteLoadError(f"could not import suite {BUILTIN_SUITE!r}: {first}") from exc
        ref = SuiteRef(BUILTIN_SUITE)
    return load_suite(ref)


if __name__ == "__main__":
    quick_exit(main())
