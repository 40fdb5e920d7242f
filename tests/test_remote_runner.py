"""Untrusted code runs where nothing is worth taking (issue 29): with ``KERNELWATCH_RUNNER_DIR``
set, the trusted side's children run in a separate runner (``kernelwatch runner serve``,
harness/isolation/remote.py) that holds no secret, through a proxy that ``child.py`` and
``supervise.py`` read exactly as a local child. Checked with a real daemon on temporary
exchange directories and the real ``kernelwatch check`` of the planted broken suite."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from kernelwatch.harness.isolation import remote
from kernelwatch.harness.isolation.exchange import RUNNER_ENV, proxy_command, trees_dir
from kernelwatch.harness.isolation.sandbox import sandbox

KERNELWATCH = Path(sys.executable).with_name("kernelwatch")
#: The planted cases a check runs both ways: a pass, a wrong result, a raise, a segfault (the
#: child dies and a fresh one resumes) and a hang (killed at the timeout, through the proxy).
CASES = ["good", "wrong_result", "raises", "segfault", "hangs"]


def _clean_env(home: Path) -> dict[str, str]:
    """A runner's environment: nothing secret-named (the test process's own may hold some)."""
    return {"PATH": os.environ["PATH"], "HOME": str(home), "LANG": "C.UTF-8"}


def _exchange() -> Path:
    """An exchange directory any user can traverse (the runner's sandbox user reads the
    staged suites; pytest's tmp_path is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="kw-exchange-"))
    os.chmod(root, 0o755)
    for sub in ("requests", "results"):
        (root / sub).mkdir(mode=0o755)
    return root


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    """A real ``kernelwatch runner serve`` on a fresh exchange; yields (exchange, log)."""
    exchange = _exchange()
    home = tmp_path_factory.mktemp("runner-home")
    log = home / "runner.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [str(KERNELWATCH), "runner", "serve", "--requests", str(exchange / "requests"),
             "--results", str(exchange / "results")],
            env=_clean_env(home), cwd=home, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        # Its last line before it serves tells the operator what caps a job's disk: here
        # nothing (no scratch filesystems named).
        while "one can fill another's disk" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the runner did not start"
            time.sleep(0.1)
        yield exchange, log
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        subprocess.run(["rm", "-rf", str(exchange)], check=False)


def _verdicts(proc: subprocess.CompletedProcess[str]) -> list[tuple[str, str, str]]:
    records = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return [(r["case"]["kernel"], r["verdict"], r["reason"].split(":")[0]) for r in records]


def _check(kernelwatch_cli, suite: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    selection = [arg for case in CASES for arg in ("-k", case)]
    return kernelwatch_cli(
        "check", "--suite", str(suite), *selection, "--dtype", "fp32", "--json",
        "--timeout", "6", env=env,
    )  # fmt: skip


def test_a_check_through_the_runner_gives_the_local_verdicts(
    runner, kernelwatch_cli, planted_suite_path
):
    exchange, log = runner
    local = _check(kernelwatch_cli, planted_suite_path, {})
    remote_run = _check(kernelwatch_cli, planted_suite_path, {RUNNER_ENV: str(exchange)})
    assert local.returncode == remote_run.returncode == 1, remote_run.stderr[-3000:]
    expected = [
        ("good", "pass", ""),
        ("wrong_result", "fail", "max_abs_err"),
        ("raises", "error", "RuntimeError"),
        ("segfault", "error", "died of signal SIGSEGV"),
        ("hangs", "error", "timed out after 6 s (hung?)"),
    ]
    assert [v[:2] for v in _verdicts(local)] == [e[:2] for e in expected]
    assert _verdicts(remote_run) == _verdicts(local)
    # The children ran in the runner: the first died in the segfault (SIGSEGV), a fresh one
    # resumed and hung, and was killed there when the supervisor killed its proxy.
    ran = [
        line
        for line in log.read_text().splitlines()
        if "kernelwatch.harness.isolation.kernel_child" in line
    ]
    assert [line.rsplit(" ", 1)[-1] for line in ran[-2:]] == ["-11", "-9"], log.read_text()
    # Nothing is left on the exchange: each proxy removed its request, the runner its result.
    time.sleep(1)
    assert list((exchange / "requests" / "jobs").iterdir()) == []
    assert list((exchange / "requests" / "trees").iterdir()) == []
    assert list((exchange / "results").iterdir()) == []


def test_a_build_through_the_runner_gives_the_local_records(
    runner, kernelwatch_cli, planted_suite_path
):
    """The build stage's workers keep their stdin open (they ask the parent questions): the
    proxy relays it as it comes, and ends cleanly while its reader still waits."""
    exchange, _ = runner
    args = ["build", "--suite", str(planted_suite_path), "-k", "good", "-k", "wrong_result",
            "--dtype", "fp32", "--arch", "sm_90a", "--workload", "smoke", "--no-cache",
            "--json"]  # fmt: skip
    local = kernelwatch_cli(*args)
    remote_run = kernelwatch_cli(*args, env={RUNNER_ENV: str(exchange)})
    assert local.returncode == remote_run.returncode == 0, remote_run.stderr[-3000:]

    def records(proc: subprocess.CompletedProcess[str]) -> list[dict]:
        found = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
        # A cubin carries its source's path (line info), a staged copy's differs each run.
        varies = {"compile_s", "cubin_bytes", "cubin_sha256"}
        return [{k: v for k, v in r.items() if k not in varies} for r in found]

    assert records(remote_run) == records(local) and len(records(local)) == 2


def _proxy(exchange: Path, argv: list[str], **kwargs) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        proxy_command(exchange, argv),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, **kwargs,
    )  # fmt: skip


def test_a_hanging_child_is_killed_through_the_proxy(runner):
    exchange, log = runner
    before = log.read_text().count("ended with")
    # The kernel child waits for its plan on stdin: held open, it hangs.
    proc = _proxy(exchange, [sys.executable, "-m", "kernelwatch.harness.isolation.kernel_child"])
    deadline = time.monotonic() + 60
    while not list((exchange / "results").iterdir()):
        assert time.monotonic() < deadline, "the runner took no job"
        time.sleep(0.05)
    time.sleep(1)
    assert proc.poll() is None
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=remote.KILL_WAIT_S + 5)
    assert time.monotonic() - started < remote.KILL_WAIT_S
    assert code != 0
    deadline = time.monotonic() + 20
    while log.read_text().count("ended with") == before:
        assert time.monotonic() < deadline, "the runner did not end the job"
        time.sleep(0.1)


def test_an_argv_outside_the_entry_points_is_refused(runner):
    exchange, _ = runner
    planted = Path(tempfile.gettempdir()) / f"kw-pwned-{os.getpid()}"
    for argv in (
        ["/bin/sh", "-c", f"touch {planted}"],
        [sys.executable, "-c", f"open({str(planted)!r}, 'w')"],
        [sys.executable, "-m", "kernelwatch.harness.isolation.kernel_child", "--extra"],
        ["strace", sys.executable, "-m", "kernelwatch.harness.isolation.kernel_child"],
    ):
        proc = _proxy(exchange, argv)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == remote.REFUSED, err
        assert out == b""
        lines = err.decode().strip().splitlines()
        assert len(lines) == 1 and "refused" in lines[0] and "entry points" in lines[0], lines
    assert not planted.exists()


def test_the_runner_refuses_to_start_holding_a_secret(tmp_path):
    empty = tmp_path / "no-secrets"
    refuse = remote.check_holds_nothing
    refuse({"PATH": "/bin"}, secret_paths=[empty], config_files=[])  # nothing: it serves
    for name in ("PGPASSWORD_FILE", "KERNELWATCH_DATABASE_URL", "PREFECT_API_AUTH_STRING",
                 "PREFECT_API_KEY", "GRAFANA_TOKEN"):  # fmt: skip
        with pytest.raises(remote.RunnerRefused, match=name):
            refuse({"PATH": "/bin", name: "x"}, secret_paths=[empty], config_files=[])
    mounted = tmp_path / "run-secrets"
    mounted.mkdir()
    (mounted / "db_writer_password").write_text("hunter2")
    with pytest.raises(remote.RunnerRefused, match="db_writer_password"):
        refuse({}, secret_paths=[empty, mounted], config_files=[])
    account = tmp_path / "kubernetes.io" / "serviceaccount"
    account.mkdir(parents=True)
    (account / "token").write_text("eyJ")
    with pytest.raises(remote.RunnerRefused, match="token"):
        refuse({}, secret_paths=[tmp_path / "kubernetes.io"], config_files=[])
    config = tmp_path / "kernelwatch.toml"
    config.write_text('[database]\nurl = "postgresql://kernelwatch_writer@db/kw"\n')
    with pytest.raises(remote.RunnerRefused, match="database URL"):
        refuse({}, secret_paths=[empty], config_files=[config])


def test_kernelwatch_runner_serve_says_what_it_found_in_one_line(tmp_path):
    exchange = tmp_path / "x"
    args = [str(KERNELWATCH), "runner", "serve", "--requests", str(exchange / "requests"),
            "--results", str(exchange / "results")]  # fmt: skip
    env = {**_clean_env(tmp_path), "PGPASSWORD_FILE": "/run/secrets/db_writer_password"}
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "PGPASSWORD_FILE" in proc.stderr
    # Scratch "filesystems" that are plain directories would cap nothing.
    (tmp_path / "scratch" / "0").mkdir(parents=True)
    env = {**_clean_env(tmp_path), "KERNELWATCH_SCRATCH": str(tmp_path / "scratch")}
    proc = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not one of its own" in proc.stderr.splitlines()[-1]
    (tmp_path / "kernelwatch.toml").write_text('[database]\nurl = "postgresql://u@db/kw"\n')
    proc = subprocess.run(
        args, env=_clean_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "database URL" in proc.stderr


_SPEW = """
import os, sys, time
# stderr first: the stdout cap kills the job, and what it wrote before must be there.
os.write(2, b"e" * (3 << 20) + b"THE-TAIL")
os.write(1, b"o" * (8 << 20))
time.sleep(60)
"""


def test_the_runner_caps_what_a_job_writes(tmp_path, monkeypatch):
    """A job's stdout past the cap kills it and is cut there; its stderr past the cap is
    kept as its tail only (``child.py`` reads tails)."""
    monkeypatch.setattr(remote, "STDERR_CAP", 1 << 20)
    monkeypatch.setattr(remote, "ENTRY_POINTS", frozenset({"kw_spew"}))
    exchange = _exchange()
    modules = Path(tempfile.mkdtemp(prefix="kw-spew-"))
    try:
        os.chmod(modules, 0o755)
        (modules / "kw_spew.py").write_text(_SPEW)
        os.chmod(modules / "kw_spew.py", 0o644)
        spec = {"argv": ["python", "-m", "kw_spew"], "env": {"PYTHONPATH": str(modules)}}
        runner = remote.Runner(exchange / "requests", exchange / "results", stdout_cap=1 << 20)
        result = _serve_one(runner, exchange, spec)
        assert (result / "stdout").stat().st_size == 1 << 20
        assert int((result / "exit").read_text()) != 0
        stderr = (result / "stderr").read_bytes()
        assert len(stderr) <= (1 << 20) + remote.STDERR_TAIL + 200
        assert stderr.rstrip().endswith(b"more than 1048576 bytes on stdout")
        assert b"THE-TAIL" in stderr[-remote.STDERR_TAIL - 200 :]
        assert b"bytes of stderr dropped" in stderr
    finally:
        subprocess.run(["rm", "-rf", str(exchange), str(modules)], check=False)


def test_the_trusted_side_starts_only_proxies_and_stages_suites_on_the_exchange(
    monkeypatch, planted_suite_path
):
    from kernelwatch.harness.suite import SuiteRef

    exchange = _exchange()
    monkeypatch.setenv(RUNNER_ENV, str(exchange))
    try:
        with sandbox() as box:
            argv = [sys.executable, "-m", "kernelwatch.harness.isolation.kernel_child"]
            command = box.command(argv)
            assert command[:4] == [
                sys.executable,
                "-m",
                "kernelwatch.harness.isolation.remote",
                "proxy",
            ]
            assert command[-3:] == argv and "jail" not in " ".join(command)
            assert box.root.parent == trees_dir(exchange)
            staged = Path(box.suite(SuiteRef(str(planted_suite_path))).target)
            assert staged.is_relative_to(box.root) and staged.read_bytes()
            assert staged.stat().st_mode & 0o004 and box.root.stat().st_mode & 0o005 == 0o005
        assert list(trees_dir(exchange).iterdir()) == []
    finally:
        subprocess.run(["rm", "-rf", str(exchange)], check=False)


def _serve_one(runner: remote.Runner, exchange: Path, spec: dict) -> Path:
    """Submit one job as a proxy would, serve until it ends; its result directory."""
    job = exchange / "requests" / "jobs" / "one"
    job.mkdir(parents=True)
    (job / "job.json").write_text(json.dumps(spec))
    for name in ("stdin", "stdin.end", "alive"):
        (job / name).touch()
    serving = threading.Thread(target=runner.serve)
    serving.start()
    try:
        result = exchange / "results" / "one"
        deadline = time.monotonic() + 120
        while not (result / "exit").exists():
            assert time.monotonic() < deadline, "the job did not end"
            time.sleep(0.1)
    finally:
        runner.stopping.set()
        serving.join(timeout=30)
    return result


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "unchecked"])
def test_without_namespaces_only_a_checked_runner_runs_untrusted_code(monkeypatch, checked):
    """The shipped capability set makes no namespace: a sandbox refuses untrusted code then,
    unless the process was checked to hold nothing worth taking (as ``serve`` does)."""
    from kernelwatch.harness.isolation import sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module, "namespaces_available", lambda: False)
    # As a runner that is not root (this test's Python lives under root's private home,
    # which a dropped user could not read without a mount namespace).
    monkeypatch.setattr(sandbox_module, "leased_identity", contextlib.nullcontext)
    monkeypatch.setattr(remote, "ENTRY_POINTS", frozenset({"kw_hello"}))
    exchange = _exchange()
    modules = Path(tempfile.mkdtemp(prefix="kw-hello-"))
    try:
        os.chmod(modules, 0o755)
        (modules / "kw_hello.py").write_text("print('hello from the runner')\n")
        os.chmod(modules / "kw_hello.py", 0o644)
        runner = remote.Runner(exchange / "requests", exchange / "results",
                               contained="checked by the test" if checked else "")  # fmt: skip
        spec = {"argv": ["python", "-m", "kw_hello"], "env": {"PYTHONPATH": str(modules)}}
        result = _serve_one(runner, exchange, spec)
        if checked:
            assert (result / "exit").read_text() == "0", (result / "stderr").read_text()
            assert (result / "stdout").read_text() == "hello from the runner\n"
        else:
            assert int((result / "exit").read_text()) == remote.REFUSED
            assert "untrusted kernel code is refused" in (result / "stderr").read_text()
    finally:
        subprocess.run(["rm", "-rf", str(exchange), str(modules)], check=False)
