"""A child that imported torch ends without the interpreter's teardown
(``harness/isolation/quick_exit.py``), and still as ``sys.exit`` would: its status, its
exit handlers run, its buffered output written."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import atexit, sys
from kernelwatch.harness.isolation.quick_exit import quick_exit
atexit.register(lambda: print("handler ran", file=sys.stderr))
sys.stdout.write("buffered, no newline")
quick_exit({code})
print("never")
"""


@pytest.mark.parametrize(
    ("code", "status", "message"),
    [("None", 0, ""), ("3", 3, ""), ("'error: what went wrong'", 1, "error: what went wrong\n")],
)
def test_it_ends_as_sys_exit_would_with_handlers_run_and_output_flushed(code, status, message):
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM.format(code=code)], capture_output=True, text=True
    )
    assert done.returncode == status
    assert done.stdout == "buffered, no newline"
    assert done.stderr == message + "handler ran\n"
