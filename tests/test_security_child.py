"""Code under test is untrusted: the child that imports it sees no secret, runs as an
unprivileged user where the worker is root, has no network where a namespace can be made,
and cannot forge a result through any channel it can reach (issue 17, findings 1-3)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from kernelwatch.harness.cuda_kernel import CUBIN_DIR_ENV
from kernelwatch.harness.isolation.channel import Forged, Reader, Writer, new_key
from kernelwatch.harness.isolation.sandbox import child_env, namespaces_available
from kernelwatch.harness.isolation.supervise import CheckRequest, run_checks
from kernelwatch.harness.suite import SuiteRef

HOSTILE = Path(__file__).parent / "planted" / "hostile_suite.py"
SECRETS = {
    "KERNELWATCH_DATABASE_URL": "postgresql://kernelwatch_writer:db-hunter2@db:5432/kw",
    "PREFECT_API_KEY": "pnu_prefect-hunter2",
    "GRAFANA_TOKEN": "glsa_grafana-hunter2",
}
FORGERS = ("stdout", "stderr", "own_fds", "parent_fds", "runner", "files")


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory):
    """The hostile suite checked once, with secrets in the worker's environment, a server
    listening on loopback, and a private directory it tries to write into."""
    tmp = tmp_path_factory.mktemp("hostile")
    suite = tmp / "suite"
    suite.mkdir()
    shutil.copy(HOSTILE, suite)
    private = tmp / "private"
    private.mkdir(mode=0o700)
    config = tmp / "kernelwatch.toml"
    config.write_text(f'[database]\nurl = "{SECRETS["KERNELWATCH_DATABASE_URL"]}"\n')
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[object] = []

    def accept() -> None:
        try:
            while True:
                accepted.append(server.accept())
        except OSError:
            pass

    threading.Thread(target=accept, daemon=True).start()
    targets = {
        "files": [str(private / "forged.jsonl"), str(Path.home() / "kw-forged.jsonl")],
        "port": server.getsockname()[1],
        "secrets": [str(config)],
    }
    (suite / "targets.json").write_text(json.dumps(targets))
    saved = {k: os.environ.get(k) for k in [*SECRETS, "KERNELWATCH_CONFIG"]}
    os.environ.update(SECRETS, KERNELWATCH_CONFIG=str(config))
    try:
        request = CheckRequest(SuiteRef(str(suite / "hostile_suite.py")), case_timeout_s=120)
        records = {r.case.kernel: r for r in run_checks(request)}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        server.close()
    return records, targets, accepted


def test_pr_code_cannot_forge_a_result_through_proc_self_fd_or_any_channel(hostile_run):
    records, targets, _ = hostile_run
    verdicts = {name: r.verdict for name, r in records.items()}
    for forger in FORGERS:
        # A forged pass, or a forgery that cost the cases after it, fails here.
        assert verdicts.get(forger) == "error", (forger, verdicts)
    assert verdicts["honest"] == "pass"
    assert verdicts["wrong"] == "fail"
    # On the channel itself, the forgery is named as such.
    assert "refused" in records["own_fds"].reason
    assert "refused" in records["runner"].reason
    if os.geteuid() == 0:
        # The sandbox user can write none of the places it aimed at.
        assert not any(Path(f).exists() for f in targets["files"])


def _spy(records) -> dict:
    found = re.search(r"SPY (\{.*\})", records["spy"].detail)
    assert found, records["spy"].detail
    return json.loads(found.group(1))


def test_pr_code_runs_without_the_workers_secrets_in_its_environment(hostile_run):
    records, _, _ = hostile_run
    seen = _spy(records)
    assert not set(SECRETS) & set(seen["env"])
    for value in SECRETS.values():
        assert value not in json.dumps(seen) and value not in records["spy"].detail
    assert seen["home"] != str(Path.home())


def test_pr_code_runs_as_an_unprivileged_user_with_no_network(hostile_run):
    records, _targets, accepted = hostile_run
    seen = _spy(records)
    if os.geteuid() == 0:
        assert seen["uid"] != 0
        # The configuration file (with the database URL) is hidden from it.
        assert all("hunter2" not in text for text in seen["secret"].values())
    if namespaces_available():
        assert seen["network"].startswith("refused"), seen["network"]
        assert accepted == []
    else:
        pytest.skip("no network namespace can be made here: the child keeps the network")


def test_the_prebuilt_cubins_reach_the_child(tmp_path):
    """A GPU host without nvcc loads the CUDA C++ kernels from ``$KERNELWATCH_CUBIN_DIR``
    (scripts/gpu-selfcheck.sh sets it); a child that lost it compiled with nvcc or failed."""
    env = child_env({CUBIN_DIR_ENV: "/opt/cubins", "PATH": "/usr/bin"}, tmp_path / "home")
    assert env[CUBIN_DIR_ENV] == "/opt/cubins"


def test_child_environment_is_an_allow_list(tmp_path):
    env = child_env(
        {
            **SECRETS,
            "PATH": "/usr/bin",
            "CUDA_VISIBLE_DEVICES": "3",
            "TRITON_API_TOKEN": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            "SSH_AUTH_SOCK": "/tmp/agent",
        },
        tmp_path / "home",
    )
    assert env["PATH"] == "/usr/bin" and env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["HOME"] == str(tmp_path / "home")
    assert env["TRITON_CACHE_DIR"].startswith(str(tmp_path))
    for name in [*SECRETS, "TRITON_API_TOKEN", "AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK"]:
        assert name not in env


def test_result_channel_refuses_unsigned_reordered_and_replayed_lines():
    key = new_key()
    lines: list[str] = []

    class Sink:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

    writer = Writer(Sink(), key)  # type: ignore[arg-type]
    writer.send({"event": "begin", "task": 0})
    writer.send({"event": "result", "task": 0})
    reader = Reader(key)
    with pytest.raises(Forged):
        reader.read(b'{"event": "result", "task": 0}\n')
    with pytest.raises(Forged):
        Reader(key).read(lines[1].encode())  # out of order
    with pytest.raises(Forged):
        Reader(new_key()).read(lines[0].encode())  # another child's key
    assert reader.read(lines[0].encode()) == {"event": "begin", "task": 0}
    with pytest.raises(Forged):
        reader.read(lines[0].encode())  # replayed


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root worker hands kernel code to a user")
def test_sandbox_setup_error_is_one_line_not_a_traceback(kernelwatch_cli, monkeypatch):
    monkeypatch.setenv("KERNELWATCH_SANDBOX_USER", "no-such-sandbox-user")
    proc = kernelwatch_cli("check", "-k", "rms_norm", "--workload", "smoke")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr == (
        "error: no user 'no-such-sandbox-user' on this machine; create it or unset "
        "KERNELWATCH_SANDBOX_USER\n"
    )


def test_the_child_is_given_the_folder_kernelwatch_itself_is_imported_from(tmp_path):
    """An editable install imports kernelwatch from its checkout through a finder, not from
    ``sys.path``: in a checkout under a private folder (a fresh clone in ``mktemp -d``) the
    sandbox user could not import ``kernelwatch.harness.isolation.kernel_child`` unless that
    folder is exposed too. Asked of a fresh interpreter elsewhere, as the ``kernelwatch`` command is
    (``python -m pytest`` has the checkout on ``sys.path`` by chance)."""
    import kernelwatch.harness

    home = Path(kernelwatch.harness.__file__).resolve().parent.parent
    probe = (
        "from kernelwatch.harness.isolation.sandbox import _python_dirs; "
        "print(*_python_dirs(), sep='\\n')"
    )
    dirs = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert str(home) in dirs
