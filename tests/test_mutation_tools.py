"""The mutation runs' own machinery (scripts/mutation.sh): the tests a mutant gets, and the
fork server that runs them. A selection that skipped a test able to kill a mutant would
inflate the score; a server that answered for a test it never ran would too."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitrepo import git

ROOT = Path(__file__).parent.parent


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODULE = """\
LIMIT = 3


@staticmethod
def clamp(x):
    if (x >
            LIMIT):
        return LIMIT
    return x
"""


def test_a_continuation_line_or_decorator_belongs_to_its_statement():
    owner = _script("mutation_coverage").statement_lines(MODULE)
    assert owner[6] == owner[7] == 6  # the `if` and its condition's second line
    assert owner[4] == owner[5] == 5  # the decorator counts as the function's statement
    assert owner[8] == 8 and owner[1] == 1


@pytest.fixture
def mutated(tmp_path, monkeypatch):
    """A committed module, a coverage map of it, and a way to change one of its lines."""
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "m.py").write_text(MODULE)
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "m")
    coverage = _script("mutation_coverage")
    tests = {"1": [], "5": [], "6": ["t.py::test_big", "t.py::test_small"], "8": ["t.py::test_big"]}
    statement = coverage.statement_lines(MODULE)
    (tmp_path / "map.json").write_text(
        json.dumps({"module": "m.py", "tests": tests, "statement": statement})
    )
    monkeypatch.chdir(tmp_path)

    def mutate(old: str, new: str):
        (tmp_path / "m.py").write_text(MODULE.replace(old, new, 1))
        return coverage.select(tmp_path / "map.json")

    return mutate


def test_a_mutant_gets_the_tests_that_run_its_statement(mutated):
    assert mutated("LIMIT):", "LIMIT + 1):") == ["t.py::test_big", "t.py::test_small"]
    assert mutated("        return LIMIT", "        return -LIMIT") == ["t.py::test_big"]


def test_a_mutant_no_test_runs_gets_every_test(mutated):
    assert mutated("LIMIT = 3", "LIMIT = 4") is None  # run only at import
    assert mutated("@staticmethod", "@classmethod") is None


def test_the_fork_server_reports_pass_failure_and_timeout(tmp_path):
    (tmp_path / "test_t.py").write_text(
        "import atexit, pathlib, time\n"
        # As tests/conftest.py removes its temporary folders at exit: in the forked child.
        "atexit.register(pathlib.Path('exited').mkdir, exist_ok=True)\n"
        "def test_passes(): assert True\n"
        "def test_fails(): assert False\n"
        "def test_hangs(): time.sleep(60)\n"
    )
    socket = tmp_path / "s.sock"
    script = str(ROOT / "scripts" / "pytest_forkserver.py")
    server = subprocess.Popen([sys.executable, script, "serve", str(socket)])
    try:
        deadline = time.monotonic() + 60
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.1)

        def run(test: str, timeout: int = 60) -> tuple[int, str]:
            args = [sys.executable, script, "run", str(socket), "--timeout", str(timeout)]
            done = subprocess.run(
                [*args, "--", "-q", "-pno:cacheprovider", f"test_t.py::{test}"],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
            )
            return done.returncode, done.stdout.strip()

        assert run("test_passes") == (0, "pytest exit 0")
        assert (tmp_path / "exited").is_dir()  # the child's exit handlers ran
        assert run("test_fails") == (1, "pytest exit 1")
        assert run("test_hangs", timeout=2) == (124, "timed out")
        assert run("test_passes") == (0, "pytest exit 0")  # the server outlives a timeout
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_sampled_module_gets_an_interval_and_a_package_weights_its_modules():
    render = _script("docs_results").mutation_scores
    table = render(
        {
            "modules": {
                "analysis/a.py": {"killed": 9, "survived": 1},
                "analysis/b.py": {"killed": 50, "survived": 50, "not sampled": 300},
                "flows/c.py": {"killed": 3, "timed out": 1, "not judged": 2},
            }
        }
    ).splitlines()
    assert table[2] == "| analysis/a.py | 10 | 10 | 9 | 0 | 1 | 0 | 90.0% |"
    # 50 % of a sample of 100 from 400: +-1.96 * sqrt(.25 / 100 * (1 - 100 / 400)) = 8.5 %.
    assert table[3] == "| analysis/b.py | 400 | 100 | 50 | 0 | 50 | 0 | 50.0% (41.5% to 58.5%) |"
    # A kill by the timeout counts; a mutant whose tests never ran is left out of the share.
    assert table[4] == "| flows/c.py | 6 | 6 | 3 | 1 | 0 | 2 | 100.0% |"
    # The package weights each module by its mutants: (10 * 0.9 + 400 * 0.5) / 410.
    assert table[8].startswith("| analysis | 410 | 110 | 59 | 0 | 51 | 0 | 51.0% (")
