"""Shared fixtures. The device is chosen before any test module imports Triton, so the
suite runs through Triton's CPU interpreter on machines without a GPU.

Under pytest-xdist (``-n 2 --dist loadfile``, docs/TESTING.md) each worker is a process of
its own that inherits the controller's environment: it gets its own Prefect home, Prefect
test server and PostgreSQL, and shares the controller's build cache (its entries are
written whole and renamed into place, so two workers can fill it at once).
"""

from __future__ import annotations

import atexit
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pg_roles import set_passwords

from kernelwatch.harness.device import Device, select_device

DEVICE = select_device()

# The record builders of tests/factories.py, as fixtures (make_measurement, make_run, ...).
pytest_plugins = ("factories",)

#: This process's pytest-xdist worker ("gw0", "gw1", ...); None in a serial session and in
#: xdist's controller.
WORKER = os.environ.get("PYTEST_XDIST_WORKER")
#: The Prefect home this conftest made, so that a worker can tell it from one a person set.
_OWN_PREFECT_HOME = "KERNELWATCH_TEST_PREFECT_HOME"


def _scratch(prefix: str) -> str:
    """A temporary directory removed when this process exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# Prefect keeps its state under PREFECT_HOME: the tests get a throw-away one, no telemetry,
# before any test module imports Prefect. One per process: the ephemeral server a
# ``kernelwatch`` subprocess starts keeps its SQLite database there, which is not for two.
if os.environ.get("PREFECT_HOME") in (None, os.environ.get(_OWN_PREFECT_HOME)):
    os.environ["PREFECT_HOME"] = os.environ[_OWN_PREFECT_HOME] = _scratch("kw-prefect-")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Builds are content-addressed (harness/build/cache.py), so one cache serves the whole
# session, workers included: a kernel built by one test is a hit for the next. Never the
# user's own cache.
if WORKER is None or not os.environ.get("KERNELWATCH_BUILD_CACHE"):
    os.environ["KERNELWATCH_BUILD_CACHE"] = _scratch("kw-build-cache-")

# One build child per stage where a test names no number: the two test workers already keep
# both cores busy, so a second child only adds its torch import (3 s of CPU) to every build
# stage. The tests of parallel builds name their workers.
os.environ.setdefault("KERNELWATCH_BUILD_WORKERS", "1")


#: The end-to-end files: each runs the product as a user does (the CLI, kernel children in
#: their sandbox, Prefect flows, wheels), which costs a child's torch import and more per
#: step. They carry the ``slow`` marker, as does any test elsewhere that runs the console
#: script (the ``kernelwatch_cli`` fixture), so the inner loop's fast tier, ``./kw test -m
#: "not slow"`` (README), runs the rest: the unit, store and dashboard tests.
#: Longest first (measured in docs/TESTING.md): ./kw test hands whole files to two workers in
#: collection order (``--dist loadfile --no-loadscope-reorder``), so started first they run
#: beside the many short files instead of alone at the end.
END_TO_END = (
    "test_flows.py",
    "test_demo.py",
    "test_onboarding.py",
    "test_gpu_rehearsal.py",
    "test_bench_cli.py",
    "test_distributed.py",
    "test_cli_check.py",
    "test_flows_cli.py",
    "test_security_bad_input.py",
    "test_build.py",
    "test_identity_builds.py",
    "test_kernel_imports.py",
    "test_remote_runner.py",
    "test_prefect_server.py",
    "test_ab_runner.py",
    "test_ab_processes.py",
    "test_multinode.py",
    "test_wheel.py",
    "test_security_child.py",
    "test_gpu_host_cli.py",
    "test_init_commands.py",
    "test_security_inputs.py",
    "test_security_flows.py",
    "test_external_suite.py",
    "test_security_unprivileged.py",
    "test_security_descendants.py",
    "test_selfcheck_ncu.py",
    "test_serving_flow.py",
)
#: The fast tier's longest files, started first for the same reason. A file missing from
#: either list only costs balance.
LONG_FAST = ("test_dashboards.py", "test_store.py", "test_changepoints.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = (*END_TO_END, *LONG_FAST)
    rank = {name: i for i, name in enumerate(order)}
    slow = pytest.mark.slow
    for item in items:
        # A test that runs the real console script is end to end wherever it lives.
        if item.path.name in END_TO_END or "kernelwatch_cli" in getattr(item, "fixturenames", ()):
            item.add_marker(slow)
    items.sort(key=lambda item: rank.get(item.path.name, len(order)))


@pytest.fixture(scope="session")
def device() -> Device:
    return DEVICE


@pytest.fixture(scope="session")
def planted_suite_path() -> Path:
    """A suite of deliberately broken kernels (tests/planted/broken_suite.py)."""
    return Path(__file__).parent / "planted" / "broken_suite.py"


@pytest.fixture(scope="session")
def kernelwatch_cli():
    """Run the real ``kernelwatch`` console script in a subprocess (``env``: variables set
    on top of this process's)."""

    def run(
        *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        exe = Path(sys.executable).with_name("kernelwatch")
        return subprocess.run(
            [str(exe), *args],
            capture_output=True,
            text=True,
            cwd=cwd,
            env={**os.environ, "COLUMNS": "200", **(env or {})},
            timeout=600,
        )

    return run


@pytest.fixture(scope="session")
def gpu_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What ``scripts/gpu-wheels.sh`` leaves for this tree (the wheel and the prebuilt cubins),
    built once for the whole session: under pytest-xdist the first worker to ask builds it
    (15 s), under a lock, and the other reads the same folder (test_wheel.py and
    test_gpu_rehearsal.py both need it). Read-only to the tests: copy it to change it."""
    from test_wheel import build_wheel

    # The workers' temporary folders share a parent for this session (and only this one).
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if WORKER is not None else base
    out = shared / "gpu-wheels"
    with open(shared / "gpu-wheels.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / "gpu-wheels.done").exists():
            build_wheel(Path(__file__).resolve().parent.parent, out)
            (shared / "gpu-wheels.done").touch()
    return out


@pytest.fixture(scope="session")
def prefect_harness():
    """Prefect's test harness: a temporary API server (SQLite) for every flow run of the
    session; it starts once, in 12-20 s."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture
def prefect_api(prefect_harness) -> dict[str, str]:
    """The environment that points a ``kernelwatch`` subprocess's flows at the session's
    Prefect server: without it each one starts an ephemeral server of its own, about ten
    seconds here. ``test_demo.py`` keeps that path: it is the main job's."""
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": str(PREFECT_API_URL.value())}


def _pg_scratch() -> str:
    """Where the store tests' PostgreSQL keeps its data: the shared-memory tmpfs where there is
    one, else /tmp (either reachable by the server's user when the tests run as root). Each
    store test clones the migrated template (``CREATE DATABASE``: about a thousand files
    written, ten megabytes): on this VM's ext4 that is 0.36 s of kernel time a test, on the
    tmpfs 0.03 s (docs/TESTING.md). Nothing here tests durability; the product's embedded
    server keeps its own directory."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else "/tmp"


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL for the store tests, started by the product's embedded-server code in
    a temporary directory (``_pg_scratch``), and stopped at the end of the session.

    ``KERNELWATCH_TEST_PG_ROOT`` names a server's directory to use instead and leave running:
    ``scripts/mutation.sh`` runs a pytest session per mutant and would otherwise spend most
    of each on starting PostgreSQL. Under pytest-xdist each worker starts its own server:
    the tests' databases have fixed names and are cloned from a template, which PostgreSQL
    refuses while another session is connected to it."""
    from kernelwatch.store import migrate
    from kernelwatch.store.embedded import EmbeddedServer

    shared = os.environ.get("KERNELWATCH_TEST_PG_ROOT")
    if shared and WORKER is not None:
        pytest.fail(
            "KERNELWATCH_TEST_PG_ROOT serves one serial session; unset it under pytest-xdist "
            "(each worker starts a PostgreSQL of its own)",
            pytrace=False,
        )
    root = Path(shared) if shared else Path(tempfile.mkdtemp(prefix="kw-pg-", dir=_pg_scratch()))
    server = EmbeddedServer(root)
    server.ensure_running()
    try:
        migrate.upgrade(server.url())
        set_passwords(server.url("postgres"))
        yield server
    finally:
        # also when a migration fails: a server left running outlives the session
        if not shared:
            server.stop(mode="immediate")  # its data is deleted next: no checkpoint needed
            shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture
def store_url(pg_server, request) -> Iterator[str]:
    """A fresh, migrated database of its own for one test, cloned from the migrated
    ``kernelwatch`` database of ``pg_server``, and dropped after it: the server's data lives
    in memory (``_pg_scratch``), where a session's few hundred clones would hold gigabytes.
    The clone copies the files (``FILE_COPY``) rather than writing every block to the WAL,
    which would hold as much again until a checkpoint."""
    import psycopg

    name = f"t_{abs(hash(request.node.nodeid)):x}"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch STRATEGY FILE_COPY')
    yield pg_server.url(name)
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        # FORCE: a connection the test's code left open ends with the test.
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
