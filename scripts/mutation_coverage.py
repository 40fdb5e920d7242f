"""Which tests can kill a mutant: per-test line coverage of one module, and the lookup the
mutation runs use to give each mutant only the tests that execute the statement it changes.

    mutation_coverage.py map MODULE OUT.json -- PYTEST_ARGS    run the tests once, under
                                                               coverage, and write the map
    mutation_coverage.py select MAP.json                       print the node ids for the
                                                               module's current mutant

A mutant on a statement no test executes while it runs (module-level code, run at import;
a line coverage never saw) gets every test: the safe answer, never a skipped one. Runs in the
venv that has pytest-cov (scripts/mutation.sh installs it).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+", re.MULTILINE)


def statement_lines(source: str) -> dict[int, int]:
    """Each physical line -> the first line of the smallest statement holding it (coverage
    counts a statement at its first line; a mutant may sit on a continuation line)."""
    owner: dict[int, tuple[int, int]] = {}
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.stmt):
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
        last = node.end_lineno or node.lineno
        for line in range(first, last + 1):
            span = last - first
            if line not in owner or span < owner[line][1]:
                owner[line] = (node.lineno, span)
    return {line: start for line, (start, _) in owner.items()}


def build_map(module: str, out: Path, pytest_args: list[str]) -> None:
    """Run PYTEST_ARGS once under coverage with a context per test; write, for each statement
    of MODULE, the node ids of the tests that executed it."""
    path = Path(module).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        data_file = Path(tmp, ".coverage")
        env = {**os.environ, "COVERAGE_FILE": str(data_file)}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        cov = [f"--cov={path.parent}", "--cov-context=test", "--cov-report="]
        subprocess.run([*command, *cov, *pytest_args], env=env, check=True, capture_output=True)
        from coverage import CoverageData

        data = CoverageData(basename=str(data_file))
        data.read()
        by_line = data.contexts_by_lineno(str(path))
    tests = {
        str(line): sorted({c.split("|")[0] for c in contexts if c})
        for line, contexts in by_line.items()
    }
    owner = statement_lines(path.read_text())
    out.write_text(json.dumps({"module": module, "tests": tests, "statement": owner}))


def mutated_lines(module: str) -> list[int]:
    """The lines (in the committed file's numbering) where the working tree differs."""
    diff = subprocess.run(
        ["git", "diff", "-U0", "--no-color", "--", module],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    lines: list[int] = []
    for start, count in _HUNK.findall(diff):
        lines.extend(range(int(start), int(start) + max(1, int(count or 1))))
    return lines


def select(map_file: Path) -> list[str] | None:
    """The tests that execute every statement the current mutant changes; None when one of
    them is executed by no test (run them all)."""
    coverage = json.loads(map_file.read_text())
    chosen: set[str] = set()
    for line in mutated_lines(coverage["module"]):
        statement = coverage["statement"].get(str(line), line)
        tests = coverage["tests"].get(str(statement))
        if not tests:
            return None
        chosen.update(tests)
    return sorted(chosen) or None


def main() -> int:
    command, *rest = sys.argv[1:]
    if command == "map":
        module, out, *pytest_args = rest
        build_map(module, Path(out), pytest_args[1:] if pytest_args[:1] == ["--"] else pytest_args)
        return 0
    chosen = select(Path(rest[0]))
    print(json.dumps(chosen))
    return 0


if __name__ == "__main__":
    sys.exit(main())
