"""The fleet path, in miniature: a real ``prefect server`` on loopback with basic
authentication on (as infra/compose.yaml runs it), ``kernelwatch deploy`` onto a process work
pool, one worker run once, and the nightly flow run completing with its run stored under the
flow run's id."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psycopg
import pytest
from gitrepo import repository_of

BIN = Path(sys.executable).parent
#: The server's basic-auth credentials (Prefect's server.api.auth_string / api.auth_string).
AUTH = "kernelwatch:fleet-test-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _api(url: str, path: str, body: dict | None = None, auth: str | None = AUTH) -> dict:
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(auth.encode()).decode()
    request = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers=headers,
        method="POST" if body is not None else "GET",
    )
    # As Prefect's own client does: a busy server answers 503 (its database timed out) and
    # the call is sent again, with a backoff (CI saw one on a loaded host).
    for delay in (1, 2, 4, 8):
        try:
            return _send(request)
        except urllib.error.HTTPError as exc:
            if exc.code not in _RETRY_CODES:
                raise
        time.sleep(delay)
    return _send(request)


def _send(request: urllib.request.Request) -> dict:
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read() or b"null")


#: The statuses Prefect's client retries (prefect/client/base.py).
_RETRY_CODES = {408, 429, 502, 503}


@pytest.fixture
def prefect_server(tmp_path):
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_API_URL": api,
        "PREFECT_SERVER_API_AUTH_STRING": AUTH,
        "PREFECT_API_AUTH_STRING": AUTH,
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            _api(api, "/health", auth=None)  # health answers without credentials
            break
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                pytest.fail(
                    f"prefect server did not start: {(tmp_path / 'server.log').read_text()[-2000:]}"
                )
            time.sleep(0.5)
    yield api, env
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()


def test_a_deployed_nightly_runs_on_a_process_worker(
    prefect_server, tmp_path, store_url, planted_suite_path
):
    api, env = prefect_server
    with pytest.raises(urllib.error.HTTPError) as refused:
        _api(api, "/deployments/filter", {}, auth=None)
    assert refused.value.code == 401
    repo = tmp_path / "kernels"
    repository_of(repo, {"suite.py": planted_suite_path}, "one kernel")
    config = tmp_path / "kernelwatch.toml"
    config.write_text(
        f"""
[[repositories]]
name = "smoke"
source = "{repo}"
suite = "suite.py"
kernels = ["good"]
dtypes = ["fp32"]
archs = []

[pools.gpu-h100]
cron = "0 3 * * *"

[bench]
budget_s = 0.2

[run]
report_dir = "{tmp_path / "reports"}"
"""
    )
    env = {
        **env,
        "KERNELWATCH_CONFIG": str(config),
        "KERNELWATCH_DATABASE_URL": store_url,
        "KERNELWATCH_SPOOL_DIR": str(tmp_path / "spool"),
    }
    deployed = subprocess.run(
        [str(BIN / "kernelwatch"), "deploy", "--pool", "gpu-h100"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert deployed.returncode == 0, deployed.stderr
    assert "nightly/smoke-gpu-h100 -> work pool gpu-h100 (cron 0 3 * * * UTC)" in deployed.stdout
    deployment = _api(api, "/deployments/name/nightly/smoke-gpu-h100")
    assert deployment["work_pool_name"] == "gpu-h100"
    assert deployment["parameters"] == {"repository": "smoke", "pool": "gpu-h100"}
    flow_run = _api(api, f"/deployments/{deployment['id']}/create_flow_run", {})
    worker = subprocess.run(
        [str(BIN / "prefect"), "worker", "start", "--pool", "gpu-h100", "--run-once"],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    state = _api(api, f"/flow_runs/{flow_run['id']}")["state"]
    assert state["type"] == "COMPLETED", (state, worker.stdout[-3000:], worker.stderr[-3000:])
    with psycopg.connect(store_url) as conn:
        stored = conn.execute(
            "SELECT trigger, pool, status FROM runs WHERE orchestration_id = %s",
            (flow_run["id"],),
        ).fetchall()
    assert stored == [("nightly", "gpu-h100", "ok")]
