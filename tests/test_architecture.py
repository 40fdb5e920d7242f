"""The house rules of docs/ARCHITECTURE.md, read from that page and checked on the source:
imports run one way, the GPU-host packages import no server-side library, and no two
modules outside ``cli/`` share a name."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "ARCHITECTURE.md"
# Libraries the GPU hosts do not have, and that pure or host-side code must not need.
SERVER_SIDE = (
    "psycopg",
    "prefect",
    "alembic",
    "pgserver",
    "grafana_foundation_sdk",
    "grafana_client",
)
HOST_SIDE = ("harness", "kernels", "analysis", "config", "serving")


def _allowed() -> dict[str, set[str]]:
    """The "who may import whom" table of docs/ARCHITECTURE.md."""
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|$", DOC.read_text(), re.M)
    return {pkg: set(re.findall(r"`(\w+)`", deps)) for pkg, deps in rows}


ALLOWED = _allowed()


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every imported module name, at module level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
    return found


def test_the_table_names_every_package():
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert set(ALLOWED) == packages


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_imports_run_one_way(package):
    wrong = []
    for path in _modules(package):
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "kernelwatch" or len(parts) < 2 or parts[1] == package:
                continue
            if parts[1] not in ALLOWED[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("package", HOST_SIDE)
def test_host_side_packages_need_no_server_library(package):
    wrong = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in _modules(package)
        for line, module in _imports(path)
        if module.split(".")[0] in SERVER_SIDE
    ]
    assert not wrong, "\n".join(wrong)


def test_module_names_are_unique_outside_cli():
    names = Counter(
        path.name
        for package in ALLOWED
        if package != "cli"
        for path in _modules(package)
        if path.name != "__init__.py" and "migrations" not in path.parts
    )
    assert [name for name, count in names.items() if count > 1] == []


def _file_map() -> set[str]:
    section = DOC.read_text().split("## The file map", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^- `([\w/]+\.py)`", section, re.M))


def _kernel_families() -> set[str]:
    """The modules of ``kernels/`` whose specs ``SUITE`` imports: adding a kernel is its
    module and its line in the tuple (issue 45), so the file map need not name them."""
    init = ROOT / "kernels" / "__init__.py"
    return {
        f"kernels/{module.rsplit('.', 1)[1]}.py"
        for _, module in _imports(init)
        if module.startswith("kernelwatch.kernels.")
    }


def test_the_file_map_names_every_module_and_nothing_else():
    modules = {
        str(path.relative_to(ROOT))
        for package in ALLOWED
        for path in _modules(package)
        if "versions" not in path.parts
        and (path.name != "__init__.py" or path.parent.name == "kernels")
    }
    named = _file_map()
    missing = modules - named - _kernel_families()
    assert sorted(missing) == [], "modules missing from docs/ARCHITECTURE.md's file map"
    assert sorted(named - modules) == [], "the file map names modules that do not exist"


def test_a_new_kernel_family_needs_no_file_map_entry():
    assert {"kernels/rmsnorm.py", "kernels/gemm.py"} <= _kernel_families()
    assert not {"kernels/inputs.py", "kernels/tuning.py"} & _kernel_families()


#: The modules a parent process loads to start, supervise and record children. The kernels'
#: own libraries (torch, Triton) belong in the children: importing torch costs a parent ~2 s
#: of CPU per command, paid again by every check, bench and nightly, on top of the child's.
PARENTS = (
    "kernelwatch.cli.check",
    "kernelwatch.cli.bench",
    "kernelwatch.cli.build",
    "kernelwatch.cli.selfcheck",
    "kernelwatch.cli.pr_check",
    "kernelwatch.flows.nightly",
    "kernelwatch.flows.prcheck",
)


def test_a_parent_of_children_never_imports_torch_or_triton():
    """One process imports the parents one after another and says after each which of
    torch and Triton are loaded: the first to load one is named (a process per parent spent
    17 s of the fast tier importing Prefect seven times)."""
    probe = (
        "import importlib, json, sys\n"
        f"for name in {list(PARENTS)!r}:\n"
        "    importlib.import_module(name)\n"
        "    print(json.dumps([name, sorted({'torch', 'triton'} & set(sys.modules))]))\n"
    )
    lines = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    loaded = dict(json.loads(line) for line in lines)
    assert list(loaded) == list(PARENTS)
    assert {name: found for name, found in loaded.items() if found} == {}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("kernelwatch", *parts)).removesuffix(".__init__")


def _import_graph() -> dict[str, set[str]]:
    """Module -> the product modules it imports (at module level, in a function or under
    ``TYPE_CHECKING``: each is a dependency someone reading the code must follow)."""
    paths = {_module_name(p): p for package in ALLOWED for p in _modules(package)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
            elif isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
        graph[name] = {t for t in targets if t in paths and t != name}
    return graph


def test_no_module_imports_one_that_imports_it_back():
    """Issue 45: ab_sides <-> supervise, sandbox <-> remote (through child) and timers <->
    telemetry imported each other, each through a private name or a type-only import."""
    graph = _import_graph()
    circles = []
    for start in sorted(graph):
        seen, stack = {start}, [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph[node]):
                if nxt == start:
                    circles.append(" -> ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert circles == []


def test_no_module_imports_another_modules_private_name():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
        for package in ALLOWED
        for path in _modules(package)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("kernelwatch")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert found == []


#: SQL statements in a string: what only ``store/`` may send to the store.
SQL = re.compile(r"\b(SELECT\s.+\sFROM|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\b", re.S)
#: Modules outside ``store/`` whose SQL is not the store's: the dashboards' panels (Grafana
#: runs their queries, and needs them beside the panel) and the reader of an Nsight Systems
#: export (a SQLite file that tool wrote).
FOREIGN_SQL = ("dashboards", "serving/traces.py")


def test_only_the_store_sends_sql_to_the_store():
    """Issue 45: the CLI's repository list, the nightly's regression notes and the alert's
    repro command each queried the store's tables from outside ``store/``."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in ALLOWED
        if package != "store"
        for path in _modules(package)
        if not str(path.relative_to(ROOT)).startswith(FOREIGN_SQL)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL.search(node.value)
    ]
    assert found == []
