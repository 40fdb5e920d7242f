"""Shared fixtures. The device is chosen before any test module imports Triton, so the
suite runs through Triton's CPU interpreter on machines without a GPU."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelwatch.harness.device import Device, select_device

DEVICE = select_device()

# The record builders of tests/factories.py, as fixtures (make_measurement, make_run, ...).
pytest_plugins = ("factories",)

# Prefect keeps its state under PREFECT_HOME: the tests get a throw-away one, no telemetry,
# before any test module imports Prefect.
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="kw-prefect-")
    atexit.register(shutil.rmtree, os.environ["PREFECT_HOME"], ignore_errors=True)
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")

# Builds are content-addressed (harness/build/cache.py), so one cache serves the whole
# session: a kernel built by one test is a hit for the next. Never the user's own cache.
os.environ["KERNELWATCH_BUILD_CACHE"] = tempfile.mkdtemp(prefix="kw-build-cache-")
atexit.register(shutil.rmtree, os.environ["KERNELWATCH_BUILD_CACHE"], ignore_errors=True)


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


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL for the store tests, started by the product's embedded-server code in
    a temporary directory (under /tmp, so that as root the server's user can reach it), and
    stopped at the end of the session.

    ``KERNELWATCH_TEST_PG_ROOT`` names a server's directory to use instead and leave running:
    ``scripts/mutation.sh`` runs a pytest session per mutant and would otherwise spend most
    of each on starting PostgreSQL."""
    from kernelwatch.store import migrate
    from kernelwatch.store.embedded import EmbeddedServer

    shared = os.environ.get("KERNELWATCH_TEST_PG_ROOT")
    root = Path(shared) if shared else Path(tempfile.mkdtemp(prefix="kw-pg-", dir="/tmp"))
    server = EmbeddedServer(root)
    server.ensure_running()
    migrate.upgrade(server.url())
    yield server
    if not shared:
        server.stop(mode="immediate")  # its data is deleted next: no checkpoint needed
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture
def store_url(pg_server, request) -> str:
    """A fresh, migrated database of its own for one test, cloned from the migrated
    ``kernelwatch`` database of ``pg_server``."""
    import psycopg

    name = f"t_{abs(hash(request.node.nodeid)):x}"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch')
    return pg_server.url(name)
