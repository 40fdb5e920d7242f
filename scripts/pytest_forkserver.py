"""A pytest fork server for mutation testing: cosmic-ray starts a fresh interpreter per mutant,
and two of the 2.5 s that costs here are spent importing torch (tests/conftest.py picks the
device through it). The server imports the heavy third-party libraries once; each request
forks a child that runs pytest from scratch, so the mutated kernelwatch module (never imported
by the server) is read from disk by the child as it stands for that mutant.

    pytest_forkserver.py serve SOCKET                        serve until SIGTERM
    pytest_forkserver.py run SOCKET [--timeout S] [--select MAP] -- ARGS
                                        pytest ARGS in a fork; exit with pytest's code

A child that outlives the timeout is killed and reported as exit 124, which cosmic-ray
counts as killed, as it does its own timeouts; give cosmic-ray a longer timeout than the
request's, so that the server is never left running a child nobody waits for. With
``--select``, ARGS' test paths give way to the tests that execute the statements the
module's current mutant changes (scripts/mutation_coverage.py), the options stay.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

# Third-party only: anything of kernelwatch imported here would be the unmutated copy.
_PRELOAD = ("numpy", "scipy.stats", "torch", "pytest", "_pytest.assertion.rewrite")
_TIMED_OUT = 124
_NOT_RUN = (4, 5)  # pytest's usage error and "no tests collected"


def _serve(path: str) -> None:
    import importlib

    sys.dont_write_bytecode = True  # a mutant and its pyc may share an mtime second
    for name in _PRELOAD:
        importlib.import_module(name)
    if os.path.exists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        while True:
            conn, _ = server.accept()
            with conn:
                request = json.loads(conn.makefile("r").readline())
                conn.sendall(f"{_run_forked(server, request)}\n".encode())
    finally:
        server.close()
        os.unlink(path)


def _run_forked(server: socket.socket, request: dict) -> int:
    pid = os.fork()
    if pid == 0:
        # The server's exit handlers are not the child's; the child's own (the temporary
        # folders tests/conftest.py makes, removed at exit) run before it ends, which
        # os._exit alone skips: each mutant left two folders in /tmp.
        atexit._clear()
        server.close()
        os.setsid()
        os.chdir(request["cwd"])
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        import pytest

        code = 3
        try:
            code = int(pytest.main(request["args"]))
        finally:
            atexit._run_exitfuncs()
            os._exit(code)
    deadline = time.monotonic() + float(request["timeout"])
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.killpg(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return _TIMED_OUT


def _run(path: str, args: list[str], timeout: float) -> int:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(path)
    with client:
        request = {"cwd": os.getcwd(), "args": args, "timeout": timeout}
        client.sendall((json.dumps(request) + "\n").encode())
        reply = client.makefile("r").readline()
    code = int(reply)
    # What cosmic-ray keeps as the mutant's output: a timeout is told from a failing test.
    print("timed out" if code == _TIMED_OUT else f"pytest exit {code}")
    return code if 0 <= code < 256 else 1


def main() -> int:
    # Everything after the first "--" is pytest's: argparse's REMAINDER would swallow the
    # options that follow the socket too.
    argv = sys.argv[1:]
    split = argv.index("--") if "--" in argv else len(argv)
    ours, pytest_args = argv[:split], argv[split + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("socket")
    run = sub.add_parser("run")
    run.add_argument("socket")
    run.add_argument("--timeout", type=float, default=600.0)
    run.add_argument("--select", help="coverage map of mutation_coverage.py")
    ns = parser.parse_args(ours)
    if ns.command == "serve":
        _serve(ns.socket)
        return 0
    if ns.select:
        from mutation_coverage import select

        chosen = select(Path(ns.select))
        if chosen is not None:
            options = [a for a in pytest_args if a.startswith("-")]
            code = _run(ns.socket, options + chosen, ns.timeout)
            # 4 and 5: a node id not found (the mutant broke the module's import, or renamed
            # a parametrised case) or none collected; the whole files tell which.
            if code not in _NOT_RUN:
                return code
    return _run(ns.socket, pytest_args, ns.timeout)


if __name__ == "__main__":
    sys.exit(main())
