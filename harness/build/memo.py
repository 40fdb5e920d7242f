"""Builds that cost what changed: a build's records remembered by the files that decide
them, looked up in the parent before any child imports torch, Triton or the suite.

Two kinds of entry, kept in the build cache's folder under ``memo/``, each under a key the
parent computes from files it read itself (never a key a child sends):

- **the suite's**: every file of the suite's tree, the request, the platform's own code and
  the toolchain -> the suite's kernels in order, with the files each one's spec code lives
  in. An unchanged commit is answered from it and its kernels' entries with no child at all.
- **a kernel's**: the files its spec's code lives in, every module of the tree they import
  (read as syntax, never run), each other file of the tree those modules spell by name (a
  CUDA source), and the suite's entry file, with the same request, platform and toolchain
  -> its build records and case recipes. A commit that changes one kernel builds only that
  kernel in the children; the others come from here.

Only a run that may write the build cache writes here (a pull request's never does), and
only for kernels whose every build succeeded. Which files a kernel's spec code lives in is
what that run's build child reported (``worker.spec_files``); the files' contents are
hashed here. What this cannot see: a module imported by a computed name, or a file the
suite reads by a name it builds at run time; docs/BUILD.md says so.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib.util
import io
import json
import os
import sys
import threading
import tokenize
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from kernelwatch.harness.build.cache import cache_key, write_whole
from kernelwatch.harness.records import BuildMetrics, CaseRecipe, RecordError
from kernelwatch.harness.suite import BUILTIN_SUITE, SuiteRef

#: Suffixes of files that no suite code reads: left out of every key.
INERT = (".md", ".rst", ".pyc")
#: A tree larger than this is not remembered (hashing it would cost more than it saves).
MAX_FILES = 20_000
MAX_BYTES = 256 << 20
#: Variables of the build children's environment that change what a compiler makes.
COMPILER_ENV = ("TRITON_", "NVCC_", "CUDA_", "PTXAS_")


@dataclass(frozen=True)
class SourceTree:
    """A suite's files as the parent read them: ``files`` maps a file's name (its path
    relative to the first of ``bases``, or ``@k/`` and its path relative to base ``k``) to
    its SHA-256, ``texts`` a Python file to its text, ``modules`` a module name to its
    file, ``entry`` is the suite's module."""

    bases: tuple[Path, ...]
    files: Mapping[str, str]
    texts: Mapping[str, str]
    modules: Mapping[str, str]
    entry: str

    def relative(self, path: str, bases: Sequence[Path]) -> str | None:
        """The name of ``path`` (as a build child saw it, its tree at ``bases``) in the tree,
        or None when it is not a file of the tree (a library's)."""
        for k, base in enumerate(bases):
            try:
                rel = Path(path).resolve().relative_to(base).as_posix()
            except (ValueError, OSError):
                continue
            name = rel if k == 0 else f"@{k}/{rel}"
            return name if name in self.files else None
        return None

    def closure(self, start: Iterable[str]) -> dict[str, str] | None:
        """The files ``start`` decide a build with: themselves, every module of the tree
        they import (transitively; a package above an imported module is its file only, not
        what it imports), each other file of the tree their text names, and the entry file
        (what it does with the specs; its own imports are not followed). None when one of
        them does not parse (its import fails in the child anyway)."""
        owner = {rel: module for module, rel in sorted(self.modules.items(), reverse=True)}
        seen: set[str] = set()
        packages: set[str] = {self.entry}
        # The entry imports every kernel's module: it is a file of each kernel's key, never
        # followed, even when it holds the spec it re-exports (a package's ``__init__``).
        todo = [rel for rel in start if rel != self.entry]
        while todo:
            rel = todo.pop()
            if rel in seen:
                continue
            seen.add(rel)
            if not rel.endswith(".py"):
                continue
            found = _imports(self.texts[rel], owner.get(rel, ""), rel.endswith("__init__.py"))
            if found is None:
                return None
            targets, parents = found
            todo += [self.modules[m] for m in targets if m in self.modules]
            packages.update(self.modules[m] for m in parents if m in self.modules)
        texts = [self.texts[rel] for rel in seen if rel.endswith(".py")]
        for rel in self.files:
            if not rel.endswith(".py") and any(Path(rel).name in t for t in texts):
                seen.add(rel)
        return {rel: self.files[rel] for rel in sorted(seen | packages)}


def scan(ref: SuiteRef) -> SourceTree | None:
    """The suite's tree, or None where it cannot be known without importing (a module
    installed elsewhere) or is too large to hash."""
    place = _place(ref)
    if place is None:
        return None
    bases, roots, entry = place
    files: dict[str, str] = {}
    texts: dict[str, str] = {}
    paths: dict[str, Path] = {}
    total = 0
    for k, base in enumerate(bases):
        for folder, dirs, names in os.walk(base):
            here = Path(folder)
            dirs[:] = sorted(
                d for d in dirs
                if not d.startswith(".") and d not in ("__pycache__", "node_modules")
                and not (here / d / "pyvenv.cfg").exists()
            )  # fmt: skip
            for name in names:
                path = here / name
                # A hidden file is a tool's (a worktree's ``.git`` names its own folder).
                if name.startswith(".") or name.endswith(INERT) or not path.is_file():
                    continue
                data = path.read_bytes()
                total += len(data)
                if len(files) >= MAX_FILES or total > MAX_BYTES:
                    return None
                rel = path.relative_to(base).as_posix()
                rel = rel if k == 0 else f"@{k}/{rel}"
                files[rel] = hashlib.sha256(data).hexdigest()
                paths[rel] = path
                if name.endswith(".py"):
                    texts[rel] = data.decode(errors="replace")
    modules: dict[str, str] = {}
    for prefix, root in roots:  # in the order they are on sys.path: the first one wins
        for rel, path in paths.items():
            if rel.endswith(".py") and path.is_relative_to(root):
                parts = list(path.relative_to(root).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                name = ".".join([prefix, *parts] if prefix else parts)
                if name:
                    modules.setdefault(name, rel)
    tree = SourceTree(bases, files, texts, modules, "")
    entry_rel = tree.relative(str(entry), bases) if isinstance(entry, Path) else modules.get(entry)
    if entry_rel is None:
        return None
    return SourceTree(bases, files, texts, modules, entry_rel)


def bases_of(ref: SuiteRef) -> tuple[Path, ...]:
    """The folders :func:`scan` reads for ``ref`` (the same trees seen from a build child's
    copy give the same names)."""
    place = _place(ref)
    return place[0] if place else ()


def _place(ref: SuiteRef) -> tuple[tuple[Path, ...], list[tuple[str, Path]], Path | str] | None:
    """(the folders of the suite's tree, [(module prefix, import root)] in ``sys.path``
    order, and its entry: a file or a module name) for ``ref``."""
    root = Path(ref.root).resolve() if ref.root else None
    src = ((root or Path.cwd()) / ref.src).resolve() if ref.src else None
    if ref.target == BUILTIN_SUITE:
        if root is not None:
            package = root / "kernels"
        else:
            found = importlib.util.find_spec(BUILTIN_SUITE)
            if found is None or not found.submodule_search_locations:
                return None
            package = Path(next(iter(found.submodule_search_locations))).resolve()
        return (package,), [(BUILTIN_SUITE, package)], package / "__init__.py"
    if ref.is_file:
        file = Path(ref.target)
        file = (file if file.is_absolute() else (root or Path.cwd()) / file).resolve()
        if root is not None and not file.is_relative_to(root):
            # A suite file kept outside the checkout it imports (``--repo checkout/src`` with
            # the file at the repository's top): two trees whose copies a sandbox places
            # apart. Not remembered, and built without the cache, until that is keyed.
            return None
        roots = [r for r in (src, root, file.parent) if r is not None]
        return _outermost(roots), [("", r) for r in roots], file
    if root is None:
        return None  # an installed module: its files are found only by importing it
    roots = [r for r in (src, root) if r is not None]
    return _outermost(roots), [("", r) for r in roots], ref.target


def _outermost(folders: list[Path]) -> tuple[Path, ...]:
    """``folders`` less each one inside another, in order (a suite file kept beside the
    repository, not in it, is a folder of its own)."""
    kept: list[Path] = []
    for folder in sorted(set(folders), key=lambda f: len(f.parts)):
        if not any(folder.is_relative_to(k) for k in kept):
            kept.append(folder)
    return tuple(sorted(kept, key=folders.index))


#: Calls whose first argument, a literal, names a module they import: importlib's, and a CuTe
#: DSL kernel named as ``"package.module:function"`` (``harness/cute_kernel.py``).
_IMPORTERS = ("import_module", "__import__", "CuteKernel")


def _imports(text: str, module: str, package: bool) -> tuple[set[str], set[str]] | None:
    """The module names the Python source ``text`` may import, and the packages above
    them, read from its syntax: ``import``, ``from ... import`` (relative ones against
    ``module``), and ``importlib.import_module``/``__import__``/``CuteKernel`` of a literal
    name."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return None
    found: set[str] = set()
    here = module if package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".") if here else []
                if node.level - 1 > len(parts):
                    continue
                parent = ".".join(parts[: len(parts) - (node.level - 1)])
                base = ".".join(p for p in (parent, base) if p)
            if base:
                found.add(base)
            found.update(".".join(p for p in (base, a.name) if p) for a in node.names)
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in _IMPORTERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value.partition(":")[0])
    parents = {".".join(n.split(".")[:i]) for n in found for i in range(1, n.count(".") + 1)}
    return found, parents - found


@functools.cache
def platform_digest() -> str:
    """A hash of kernelwatch's own harness code: records are what this code makes of a
    build, so another version of it is another key."""
    harness = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(harness.rglob("*.py")):
        digest.update(path.relative_to(harness).as_posix().encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _toolchain(env: Mapping[str, str]) -> dict[str, Any]:
    from kernelwatch.harness.build import nvcc

    try:
        cuda = nvcc.nvcc_version()
    except nvcc.NvccError:
        cuda = "none"
    versions = {name: metadata.version(name) for name in ("torch", "triton")}
    compiler_env = sorted((k, v) for k, v in env.items() if k.startswith(COMPILER_ENV))
    return {**versions, "nvcc": cuda, "python": sys.version, "env": compiler_env}


class Memo:
    """The memo of one build request over one tree (see the module docstring)."""

    def __init__(
        self, tree: SourceTree, folder: Path, request: Mapping[str, Any], env: Mapping[str, str]
    ) -> None:
        self.tree = tree
        self.folder = folder
        self._common = {"platform": platform_digest(), "toolchain": _toolchain(env),
                        "request": dict(request)}  # fmt: skip

    def suite_key(self, kernels: Sequence[str]) -> str:
        return cache_key({**self._common, "kernels": list(kernels), "files": self.tree.files})

    def kernel_key(self, kernel: str, files: Sequence[str]) -> str | None:
        """The key of ``kernel`` whose spec code lives in ``files`` (relative), or None when
        it cannot be known (no file of the tree, or one that does not parse)."""
        closure = self.tree.closure(files) if files else None
        if closure is None:
            return None
        return cache_key({**self._common, "kernel": kernel, "files": closure})

    def get(self, key: str) -> Any:
        try:
            return json.loads((self.folder / key[:2] / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: Any) -> None:
        write_whole(self.folder / key[:2] / f"{key}.json", json.dumps(value))


class Recall:
    """One build's use of the memo: the whole answer before any child starts, the kernels it
    holds when a child names the suite's kernels, and what the build stores afterwards."""

    def __init__(self, memo: Memo, kernels: Sequence[str]) -> None:
        self.memo = memo
        self.kernels = list(kernels)
        self.child_bases: tuple[Path, ...] = ()
        self._lock = threading.Lock()
        self._claims: list[tuple[str, list[str], str | None]] | None = None
        self._held: dict[str, Any] = {}
        self._digests: dict[Any, str | None] = {}

    def whole(self) -> tuple[str, list[BuildMetrics], list[CaseRecipe]] | None:
        """The suite's name, records and recipes when every kernel is held, else None."""
        entry = self.memo.get(self.memo.suite_key(self.kernels))
        if not isinstance(entry, dict):
            return None
        held = []
        for kernel in entry.get("kernels", []):
            key = self.memo.kernel_key(kernel["name"], kernel["files"])
            value = self.memo.get(key) if key else None
            if value is None:
                return None
            held.append(value)
        try:
            return entry["suite"], *_parse(held)
        except (KeyError, TypeError, ValueError, RecordError):
            return None

    def held(self, claims: Any) -> list[str]:
        """The kernels of a child's ``claims`` (name and files, as the child saw them) that
        the memo holds; the first child's claims decide for every child of the build."""
        with self._lock:
            if self._claims is None:
                self._claims = []
                for claim in claims if isinstance(claims, list) else []:
                    name, files = str(claim.get("name")), claim.get("files") or []
                    rels = [self.memo.tree.relative(str(f), self.child_bases) for f in files]
                    mine = sorted({r for r in rels if r is not None})
                    key = self.memo.kernel_key(name, mine)
                    value = self.memo.get(key) if key else None
                    self._claims.append((name, mine, key))
                    if isinstance(value, dict):
                        self._held[name] = value
            return list(self._held)

    def bound(self, key: str, kernel: Any) -> str | None:
        """The cache key this parent stores and looks up a child's build under: the key the
        child sent bound to ``kernel``'s source files as this parent read them (comments and
        blank lines left out, so an edited comment still finds its build). A child can so
        store only under its own tree's source: a record it plants for another commit's
        key is never found there. None for a kernel the parent cannot key (then nothing is
        looked up or stored)."""
        with self._lock:
            if kernel not in self._digests:
                files = next((f for n, f, _ in self._claims or [] if n == kernel), None)
                closure = self.memo.tree.closure(files) if files else None
                self._digests[kernel] = (
                    None if closure is None else _source_digest(self.memo.tree, closure)
                )
            digest = self._digests[kernel]
        if digest is None:
            return None
        return hashlib.sha256(f"{key}\0{digest}".encode()).hexdigest()

    def held_count(self) -> int:
        """How many records the held kernels bring."""
        return sum(len(v.get("records", [])) for v in self._held.values())

    def merge(
        self, records: list[BuildMetrics], recipes: list[CaseRecipe]
    ) -> tuple[list[BuildMetrics], list[CaseRecipe]]:
        """The fresh records and recipes with the held kernels', in the suite's kernel
        order (each kernel's own records in the order they were made)."""
        try:
            held_records, held_recipes = _parse(list(self._held.values()))
        except (KeyError, TypeError, ValueError, RecordError):
            held_records, held_recipes = [], []  # a torn entry: those kernels go unreported
        order = {name: i for i, (name, _, _) in enumerate(self._claims or [])}
        merged = sorted([*records, *held_records], key=lambda r: order.get(r.kernel, len(order)))
        return merged, [*recipes, *held_recipes]

    def remember(self, suite: str, records: list[BuildMetrics], recipes: list[CaseRecipe]) -> None:
        """Store each freshly built kernel whose builds all succeeded, and the suite's entry
        when every kernel is then held."""
        complete = self._claims is not None
        for name, _, key in self._claims or []:
            if name in self._held:
                continue
            mine = [r for r in records if r.kernel == name]
            if key is None or any(r.status != "ok" for r in mine):
                complete = False
                continue
            value = {"records": [r.to_json() for r in mine],
                     "recipes": [r.to_json() for r in recipes if r.kernel == name]}  # fmt: skip
            self.memo.put(key, value)
        if complete:
            kernels = [{"name": n, "files": f} for n, f, _ in self._claims or []]
            self.memo.put(self.memo.suite_key(self.kernels), {"suite": suite, "kernels": kernels})


def _source_digest(tree: SourceTree, closure: Mapping[str, str]) -> str:
    """A hash of ``closure``'s files with each Python file's comments and blank lines left
    out (its tokens, not its lines); another file by its bytes."""
    digest = hashlib.sha256()
    for rel, sha in sorted(closure.items()):
        digest.update(rel.encode() + b"\0")
        text = tree.texts.get(rel)
        if text is None:
            digest.update(sha.encode())
            continue
        try:
            tokens = tokenize.generate_tokens(io.StringIO(text).readline)
            kept = [t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL)]
        except (tokenize.TokenError, SyntaxError):
            kept = [text]
        digest.update("\x1f".join(kept).encode())
    return digest.hexdigest()


def _parse(held: list[Any]) -> tuple[list[BuildMetrics], list[CaseRecipe]]:
    records = [replace(BuildMetrics.from_json(r), cached=True) for h in held for r in h["records"]]
    return records, [CaseRecipe.from_json(r) for h in held for r in h["recipes"]]
