"""Find a suite (a module exposing ``SUITE``) in this package or in any repository checkout,
and turn a user's selection (kernels, workload, dtypes, case parameters) into the list of
cases to run."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kernelwatch.harness.isolation import gitcmd

if TYPE_CHECKING:  # spec imports torch; the supervising process never needs it
    from kernelwatch.harness.spec import Params, Suite

#: The suite shipped with kernelwatch (``kernels/``).
BUILTIN_SUITE = "kernelwatch.kernels"


class SuiteLoadError(Exception):
    """The suite could not be imported or does not follow the interface."""


class SelectionError(ValueError):
    """The user asked for kernels, a workload or dtypes the suite does not have."""


@dataclass(frozen=True)
class SuiteRef:
    """Where a suite lives.

    ``target`` is a dotted module name (``kernelwatch.kernels``, ``mykernels.suite``) or a path
    to a ``.py`` file (relative to ``root``). ``root`` is the repository checkout whose code
    the suite imports; it is put first on ``sys.path`` so the kernels come from that
    checkout, not from whatever is installed. For a file target without a root, the file's
    directory is used. ``src`` is the source root inside the checkout (``src`` in a src/
    layout), put on ``sys.path`` before ``root``. ``revision`` is the commit checked out at
    ``root`` when the process that made the reference knew it (a sandbox's copy of a checkout
    has no ``.git``, and its user could not read the original's).
    """

    target: str = BUILTIN_SUITE
    root: str | None = None
    src: str | None = None
    revision: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "root": self.root,
            "src": self.src,
            "revision": self.revision,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SuiteRef:
        return cls(data["target"], data.get("root"), data.get("src"), data.get("revision"))

    @property
    def is_file(self) -> bool:
        return is_file_target(self.target)


def is_file_target(target: str) -> bool:
    """Whether a suite target names a file (else a dotted module)."""
    return target.endswith(".py") or "/" in target


def locate(target: str, repository: Path | None, cwd: Path | None = None) -> str:
    """A suite target as a person typed it, made unambiguous: a relative file path names a
    file in ``repository``; when the repository has no such file but the current directory
    does, that file is meant, by its absolute path (the repository's own files stay
    relative, so each revision reads its own). Module names and absolute paths are kept."""
    path = Path(target)
    if not is_file_target(target) or path.is_absolute() or repository is None:
        return target
    here = (cwd or Path.cwd()) / path
    if (repository / path).is_file() or not here.is_file():
        return target
    return in_repository(str(here.resolve()), repository)


def in_repository(target: str, repository: Path) -> str:
    """An absolute suite file path inside ``repository`` as a path relative to it, so it is
    read from whichever checkout of the repository a run imports from; anything else as it
    is (a suite kept outside the repository is the same file for every revision)."""
    path = Path(target)
    if not (is_file_target(target) and path.is_absolute()):
        return target
    try:
        return str(path.resolve().relative_to(repository.resolve()))
    except ValueError:
        return target


def at_revision(suite: SuiteRef, top: Path, checkout: Path) -> SuiteRef:
    """``suite`` as imported from ``checkout``, a worktree of one revision of the git
    repository whose top is ``top``. The suite's ``root`` is a directory of that repository,
    its top when None; one below the top (``repo/python``) stands for the same directory of
    the worktree. A suite file inside the repository, relative to the root or by its
    absolute path there, is that revision's. Both ``cli build --rev`` and the flows' stages
    resolve a revision's suite here."""
    root = Path(suite.root) if suite.root else top
    below = root.resolve().relative_to(top.resolve())
    target = in_repository(suite.target, root)
    if is_file_target(target) and not Path(target).is_absolute():
        target = str(below / target)
    src = below / suite.src if suite.src else below
    return SuiteRef(target, str(checkout), None if src == Path() else str(src))


def source_of(path: Path) -> str:
    """Which file was imported, and from which revision: ``path`` relative to its git
    repository's top with the checkout's commit (``suite.py @ 3f2a9c01d2e4``), or the path
    alone outside a repository."""
    top = gitcmd.probe(path.parent, "rev-parse", "--show-toplevel")
    sha = revision_of(path.parent)
    if top is None or sha is None:
        return str(path)
    return f"{path.resolve().relative_to(Path(top).resolve())} @ {sha[:12]}"


def revision_of(directory: Path) -> str | None:
    """The commit checked out in the git repository holding ``directory``; None outside one
    (or when ``directory`` is missing: the import reports that)."""
    return gitcmd.probe(directory, "rev-parse", "HEAD") if directory.is_dir() else None


def _source(file: Path, ref: SuiteRef) -> str:
    """``source_of(file)``, or, for a file under a root whose revision ``ref`` carries, the
    same form from what the reference says (git cannot tell inside a sandbox's copy)."""
    root = Path(ref.root).resolve() if ref.root else None
    if ref.revision and root is not None and file.resolve().is_relative_to(root):
        return f"{file.resolve().relative_to(root)} @ {ref.revision[:12]}"
    return source_of(file)


@dataclass(frozen=True)
class Task:
    """One case to run: a kernel, a workload case, a dtype, and the tolerance it is held to."""

    kernel: str
    workload: str
    params: Params
    dtype: str
    tolerance: float

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "workload": self.workload,
            "params": dict(self.params),
            "dtype": self.dtype,
            "tolerance": self.tolerance,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Task:
        return cls(
            data["kernel"], data["workload"], data["params"], data["dtype"], data["tolerance"]
        )


@dataclass(frozen=True)
class Loaded:
    """An imported suite, and ``source``: the file and revision it was imported from
    (:func:`source_of`), kept in every record's provenance."""

    suite: Suite
    source: str


def load_suite(ref: SuiteRef) -> Suite:
    """Import the suite ``ref`` points at. Call only in a process that may run kernel code."""
    return import_suite(ref).suite


def import_suite(ref: SuiteRef) -> Loaded:
    """Import the suite ``ref`` points at, and say where from. Call only in a process that
    may run kernel code."""
    from kernelwatch.harness.spec import Suite

    root = Path(ref.root).resolve() if ref.root else None
    if root is not None and not (os.access(root, os.R_OK | os.X_OK) and root.is_dir()):
        # Missing, or out of the sandbox user's reach: either way nothing to import.
        raise SuiteLoadError(f"suite root {ref.root!r} is not a directory this process can read")
    src = (root or Path.cwd()) / ref.src if ref.src else None
    if src is not None and not src.is_dir():
        raise SuiteLoadError(
            f"source root {ref.src!r} is not a directory in {root or Path.cwd()}; "
            "pass --src (or `src` in kernelwatch.toml) relative to the repository"
        )
    try:
        if ref.is_file:
            file = _suite_file(ref.target, root)
            # The suite's own folder too, after the repository: a suite kept outside it
            # imports the helper modules beside it.
            beside = None if file.parent == root else file.parent
            _prepend(src, root, beside)
            module = _import_file(file)
        else:
            _prepend(src, root)
            module = importlib.import_module(ref.target)
    except SuiteLoadError:
        raise
    except Exception as exc:  # an import error in a commit's kernels is that commit's failure
        first = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
        raise SuiteLoadError(f"could not import suite {ref.target!r}: {first}") from exc
    suite = getattr(module, "SUITE", None)
    if not isinstance(suite, Suite):
        raise SuiteLoadError(
            f"suite module {ref.target!r} has no SUITE of type kernelwatch.harness.spec.Suite "
            f"(found {type(suite).__name__}); see docs/SUITES.md"
        )
    file = getattr(module, "__file__", None)
    return Loaded(suite, _source(Path(file), ref) if file else ref.target)


def load_suite_isolated(ref: SuiteRef) -> Loaded:
    """Import the suite ``ref`` points at, then forget its checkout: take the directories
    the import put on ``sys.path`` off again, and drop from ``sys.modules`` every module it
    brought in from them, every stand-in it made for a missing dependency (a module object
    with no import spec, or ``kernel_imports.stub_modules``'), and the import hooks it added.
    Another checkout whose code uses the same package names (the same
    repository at another commit) can then be loaded beside it in this process; the first
    suite's functions keep their own module globals. Code that imports lazily, at launch
    time, from the forgotten checkout fails there, as that case's error.
    """
    modules_before, path_before, finders_before = (
        set(sys.modules),
        list(sys.path),
        list(sys.meta_path),
    )
    loaded = import_suite(ref)
    added = {Path(p).resolve() for p in set(sys.path) - set(path_before)}
    # Decide every module before dropping any: a namespace package's __path__ is recomputed
    # from its parent's, which must still be there (and sys.path as the import left it).
    forgotten = [
        name
        for name in set(sys.modules) - modules_before
        if _stand_in(name) or any(_lives_under(sys.modules[name], directory) for directory in added)
    ]
    sys.path[:] = path_before
    sys.meta_path[:] = finders_before
    for name in forgotten:
        del sys.modules[name]
    importlib.invalidate_caches()
    return loaded


def _stand_in(name: str) -> bool:
    """Whether ``sys.modules[name]`` is one the suite made rather than imported, for a
    missing dependency (``types.ModuleType(...)`` or any object): it and its top-level
    package have no import spec saying where they came from. An extension's submodules
    (``triton._C.libtriton.ir``) have none either, but their package does, and stay."""
    top = sys.modules.get(name.partition(".")[0])
    return _made(sys.modules[name]) and (top is None or _made(top))


def _made(module: Any) -> bool:
    # A stand-in has no spec, or one with no origin and no folder (kernel_imports' stubs);
    # a namespace package has no origin either, but has its folders.
    spec = getattr(module, "__spec__", None)
    if not isinstance(module, types.ModuleType) or spec is None:
        return True
    return spec.origin is None and not list(spec.submodule_search_locations or ())


def _lives_under(module: Any, directory: Path) -> bool:
    # A namespace package has no __file__, only __path__ entries.
    files = [getattr(module, "__file__", None), *getattr(module, "__path__", ())]
    return any(f and Path(f).resolve().is_relative_to(directory) for f in files)


def _prepend(*directories: Path | None) -> None:
    """Put ``directories`` first on ``sys.path``, in their order."""
    sys.path[0:0] = [str(d) for d in directories if d is not None]


def _suite_file(target: str, root: Path | None) -> Path:
    path = Path(target)
    if not path.is_absolute():
        path = (root or Path.cwd()) / path
    if not path.is_file():
        raise SuiteLoadError(f"suite file {str(path)!r} does not exist")
    return path


def _import_file(path: Path) -> Any:
    # A unique module name per file, so two checkouts' suites never shadow each other.
    name = "kernelwatch_suite_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SuiteLoadError(f"cannot import {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


T = TypeVar("T")


def parse_params(pins: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` texts (``--param m=4096``) as a mapping; raises :class:`SelectionError`
    for one without ``=`` or a key given twice."""
    found: dict[str, str] = {}
    for pin in pins:
        key, sep, value = pin.partition("=")
        if not sep or not key.strip():
            raise SelectionError(f"case parameter {pin!r} is not KEY=VALUE (e.g. m=4096)")
        if key.strip() in found:
            raise SelectionError(f"case parameter {key.strip()!r} is given twice")
        found[key.strip()] = value.strip()
    return found


def _same_value(actual: Any, given: str) -> bool:
    """Whether a case's parameter is the text ``given``: the store writes parameters as
    JSON text (``true``, ``1e-05``), a user types them as they read them."""
    if isinstance(actual, bool):
        return given.lower() == str(actual).lower()
    if isinstance(actual, int | float):
        try:
            return float(given) == float(actual)
        except ValueError:
            return False
    return str(actual) == given


def matches(params: Params, pins: dict[str, str]) -> bool:
    """Whether a case with ``params`` has every pinned parameter's value."""
    return all(key in params and _same_value(params[key], v) for key, v in pins.items())


def spread(cases: Sequence[T], count: int) -> list[T]:
    """At most ``count`` of ``cases`` (all when 0), evenly spread: the first and the last,
    and between them at equal steps; one alone is the middle case."""
    if count <= 0 or count >= len(cases):
        return list(cases)
    if count == 1:
        return [cases[len(cases) // 2]]
    step = (len(cases) - 1) / (count - 1)
    return [cases[round(i * step)] for i in range(count)]


def select_tasks(
    suite: Suite,
    kernels: Sequence[str] = (),
    workload: str = "smoke",
    dtypes: Sequence[str] = (),
    per_kernel: int = 0,
    params: Sequence[str] = (),
) -> list[Task]:
    """Every (kernel, case, dtype) the selection names, in suite order.

    With no ``kernels`` every kernel that has ``workload`` is taken; a kernel named
    explicitly must have it. ``params`` (``KEY=VALUE`` texts) keep only the cases with those
    parameter values: all of a case's parameters pin that case. ``per_kernel``: at most that
    many of each kernel's cases, evenly spread from its first to its last (one: the middle
    one); 0 takes them all. Raises :class:`SelectionError` naming the valid choices.
    """
    from kernelwatch.harness.spec import DTYPES

    unknown = [k for k in kernels if k not in suite.names]
    if unknown:
        raise SelectionError(
            f"unknown kernel {', '.join(map(repr, unknown))}; "
            f"valid kernels: {', '.join(suite.names)}"
        )
    if workload not in suite.workloads:
        raise SelectionError(
            f"unknown workload {workload!r}; valid workloads: {', '.join(suite.workloads)}"
        )
    bad_dtypes = [d for d in dtypes if d not in DTYPES]
    if bad_dtypes:
        raise SelectionError(
            f"unknown dtype {', '.join(map(repr, bad_dtypes))}; valid dtypes: {', '.join(DTYPES)}"
        )
    specs = [suite.kernel(k) for k in kernels] if kernels else list(suite.kernels)
    lacking = [s.name for s in specs if kernels and workload not in s.workloads]
    if lacking:
        raise SelectionError(f"kernel {', '.join(lacking)} has no workload {workload!r}")
    pins = parse_params(params)
    pinned = {s.name: [c for c in s.workloads.get(workload, ()) if matches(c, pins)] for s in specs}
    if pins and not any(pinned.values()):
        seen = [" ".join(f"{k}={v}" for k, v in c.items())
                for s in specs for c in s.workloads.get(workload, ())]  # fmt: skip
        raise SelectionError(
            f"no {workload!r} case has {' '.join(params)}; cases: {'; '.join(seen[:8])}"
            + (f" and {len(seen) - 8} more" if len(seen) > 8 else "")
        )
    tasks = [
        Task(spec.name, workload, dict(case), dtype, spec.tolerance[dtype])
        for spec in specs
        if workload in spec.workloads
        for case in spread(pinned[spec.name], per_kernel)
        for dtype in spec.dtypes
        if not dtypes or dtype in dtypes
    ]
    if not tasks:
        raise SelectionError(
            f"no case matches: kernels {', '.join(s.name for s in specs)} declare no "
            f"{workload!r} case in dtypes {', '.join(dtypes)}"
        )
    return tasks


def lacks(suite: Suite, task: Task) -> str | None:
    """Why ``suite`` cannot run ``task`` (a case selected from another commit's suite), or
    None when it has the kernel, the workload case and the dtype."""
    if task.kernel not in suite.names:
        return f"has no kernel {task.kernel!r}"
    spec = suite.kernel(task.kernel)
    if dict(task.params) not in [dict(p) for p in spec.workloads.get(task.workload, ())]:
        label = " ".join(f"{k}={v}" for k, v in task.params.items())
        return f"has no {task.workload!r} case {label} of {task.kernel!r}"
    if task.dtype not in spec.dtypes:
        return f"does not declare {task.dtype} for {task.kernel!r}"
    return None
