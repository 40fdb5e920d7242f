"""Untrusted code on a worker that is not root and holds no capability (issue 29, findings
2-4), run the way such a worker runs it: an unprivileged uid under ``setpriv`` with every
capability dropped, a Python that uid can read, the worker's secrets in its environment, its
files (spool, the embedded database's password and socket, a repository) owned by that uid.

With user namespaces, the hostile suite's kernel reaches none of it: no environment with the
secret, no password file, no socket, no hook written, no spool file, not the parent's memory,
no process outside its own PID namespace, nothing left running. Without them, untrusted code
is refused in one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
ATTACK = Path(__file__).parent / "planted" / "unprivileged_attack.py"
#: Debian's own Python, which any user may run (root's pyenv Python is private).
SYSTEM_PYTHON = Path("/usr/bin/python3.11")
#: The worker's uid: no account needed, as in a container started with ``--user``.
UID = 64999
SECRET = "planted-secret-5b1e"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not SYSTEM_PYTHON.exists(),
    reason="needs root (to make the unprivileged worker), setpriv and /usr/bin/python3.11",
)

_PARENT = """
import json, sys
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.harness.isolation.supervise import CheckRequest, run_checks
for record in run_checks(CheckRequest(SuiteRef(sys.argv[1]), case_timeout_s=120)):
    print(json.dumps({"kernel": record.case.kernel, "verdict": record.verdict,
                      "reason": record.reason}))
"""


def _link_tree(source: Path, target: Path) -> None:
    """``source``'s files under ``target`` as hard links (the unprivileged uid cannot follow a
    symlink into a private clone); skips the test where they are on two filesystems."""
    try:
        shutil.copytree(source, target, symlinks=True, copy_function=os.link)
    except shutil.Error as exc:
        pytest.skip(f"cannot hard-link the host's packages here: {exc.args[0][0][2]}")


def _python_for(top: Path) -> Path:
    """A venv of the system Python that the unprivileged uid can read: the host venv's
    packages (hard links, not the editable install) and a copy of kernelwatch's folders."""
    venv = top / "venv"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True)
    host = Path(next(p for p in sys.path if p.endswith("site-packages")))
    site = top / "site"
    site.mkdir()
    for entry in host.iterdir():
        if entry.name.startswith(("__editable__", "kernelwatch")) or entry.name == "__pycache__":
            continue
        if entry.is_dir() and not entry.is_symlink():
            _link_tree(entry, site / entry.name)
        elif entry.is_file():
            os.link(entry, site / entry.name)
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, folder in folders["package-dir"].items():
        shutil.copytree(ROOT / folder, top / "src" / Path(*package.split(".")),
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    (venv / "lib" / "python3.11" / "site-packages" / "host.pth").write_text(
        f"import site; site.addsitedir({str(site)!r})\n{top / 'src'}\n"
    )
    return venv / "bin" / "python"


class _Listener:
    """A Unix socket standing for the embedded database's, counting who connects."""

    def __init__(self, path: Path) -> None:
        self.reached = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        path.chmod(0o777)
        self.sock.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.reached += 1
            conn.close()


@pytest.fixture(scope="module")
def readable():
    """A directory any user may traverse, holding a Python any user may run."""
    top = Path(tempfile.mkdtemp(prefix="kw-unprivileged-"))
    top.chmod(0o755)
    try:
        yield top, _python_for(top)
    finally:
        shutil.rmtree(top, ignore_errors=True)


def _world(home: Path, owner: int | None) -> dict:
    """A worker's files under ``home`` (spool, database password and socket, a repository),
    the hostile suite with the paths it goes for, and a listener on the socket; all
    ``owner``'s (None: this process's, root's)."""
    for sub in ("spool", "pg/run", "repo/.git/hooks", "suite"):
        (home / sub).mkdir(parents=True)
    (home / "pg" / "password").write_text(SECRET)
    (home / "pg" / "password").chmod(0o600)
    shutil.copy(ATTACK, home / "suite" / "attack_suite.py")
    targets = {
        "secret": SECRET,
        "password": str(home / "pg" / "password"),
        "socket": str(home / "pg" / "run" / ".s.PGSQL.5432"),
        "repository": str(home / "repo"),
        "spool": str(home / "spool"),
    }
    (home / "suite" / "targets.json").write_text(json.dumps(targets))
    (home / "suite").chmod(0o755)
    listener = _Listener(Path(targets["socket"]))
    (home / "pg" / "run").chmod(0o700)
    if owner is not None:
        for directory, dirs, files in os.walk(home):
            for name in [directory, *(os.path.join(directory, n) for n in dirs + files)]:
                os.lchown(name, owner, owner)
        home.chmod(0o700)
    return {"home": home, "targets": targets, "listener": listener}


@pytest.fixture(scope="module")
def worker(readable):
    """The unprivileged worker's world: its Python, and its own files (uid ``UID``)."""
    top, python = readable
    return {"python": python, **_world(top / "home", UID)}


def _no_trace_of_the_attack(world: dict, proc: subprocess.CompletedProcess[str]) -> str:
    """The attack's record's reason, once everything it went for is checked untouched."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [json.loads(line) for line in proc.stdout.splitlines()]
    reason = record["reason"]
    assert "REACHED []" in reason, reason
    targets = world["targets"]
    assert not (Path(targets["repository"]) / ".git" / "hooks" / "post-checkout").exists()
    assert not (Path(targets["spool"]) / "forged.json").exists()
    assert world["listener"].reached == 0
    assert SECRET not in proc.stdout + proc.stderr
    return reason


def _as_worker(worker, argv: list[str], path: str = "/usr/local/bin:/usr/bin:/bin"):
    env = {
        "PATH": path,
        "HOME": str(worker["home"]),
        "KERNELWATCH_DATABASE_URL": f"postgresql://writer:{SECRET}@db/kernelwatch",
        "PREFECT_API_KEY": SECRET,
        "TRITON_INTERPRET": "1",
    }
    return subprocess.run(
        [shutil.which("setpriv"), f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
         "--inh-caps=-all", "--bounding-set=-all", "--", str(worker["python"]), *argv],
        env=env, cwd=worker["home"], capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def _processes_of(uid: int) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid:
                found.append(Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace"))
        except OSError:
            continue
    return found


def test_hostile_code_reaches_nothing_of_an_unprivileged_worker(worker):
    suite = worker["home"] / "suite" / "attack_suite.py"
    reason = _no_trace_of_the_attack(worker, _as_worker(worker, ["-c", _PARENT, str(suite)]))
    pids = json.loads(re.search(r"PIDS (\[[\d, ]*\])", reason).group(1))
    assert len(pids) <= 3, f"the kernel saw processes outside its own: {pids}"
    assert not [c for c in _processes_of(UID) if c.startswith("sleep")], "a process outlived it"


def test_untrusted_code_is_refused_in_one_line_without_namespaces(worker):
    suite = worker["home"] / "suite" / "attack_suite.py"
    # No `unshare` on PATH: the namespaces cannot be made, as on a worker without them.
    bare = worker["home"] / "bare-bin"
    if not bare.exists():
        bare.mkdir()
        os.chown(bare, UID, UID)
    proc = _as_worker(
        worker, ["-m", "kernelwatch.cli", "check", "--suite", str(suite)], path=str(bare)
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "untrusted kernel code is refused" in lines[0], proc.stderr
    assert "REACHED" not in proc.stdout + proc.stderr


def test_hostile_code_reaches_nothing_through_the_shipped_runner(readable):
    """The deployed split: a runner as the compose service runs it (root with only the
    capabilities the manifest grants, so no namespace can be made; no network; nothing
    secret), and the trusted side, which holds the secrets, handing it the suite through
    the exchange. Each sandbox is a uid of its own there, so the kernel reaches neither the
    trusted side's files nor its processes."""
    top, python = readable
    compose = yaml.safe_load((ROOT / "infra" / "compose.yaml").read_text())
    capabilities = compose["services"]["runner-h100"]["cap_add"]
    world = _world(top / "runner-world", owner=None)
    exchange = top / "exchange"
    for sub in ("requests", "results"):
        (exchange / sub).mkdir(parents=True)
    runner_home = top / "runner-home"
    runner_home.mkdir()
    log = runner_home / "runner.log"
    bounding = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
    # As shipped, the runner can make no namespace: only uids keep its children apart.
    probe = ["setpriv", "--inh-caps=-all", f"--bounding-set={bounding}", "--",
             "unshare", "--mount", "--pid", "--", "true"]  # fmt: skip
    assert subprocess.run(probe, capture_output=True, check=False).returncode != 0
    with open(log, "wb") as err:
        daemon = subprocess.Popen(
            ["unshare", "--net", "--", "setpriv", "--inh-caps=-all", f"--bounding-set={bounding}",
             "--", str(python), "-m", "kernelwatch.cli", "runner", "serve",
             "--requests", str(exchange / "requests"), "--results", str(exchange / "results")],
            env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(runner_home)},
            cwd=runner_home, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "serving" not in log.read_text():
            assert daemon.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the runner did not start"
            time.sleep(0.1)
        trusted = {
            **os.environ,
            "KERNELWATCH_RUNNER_DIR": str(exchange),
            "KERNELWATCH_DATABASE_URL": f"postgresql://writer:{SECRET}@db/kernelwatch",
            "PREFECT_API_KEY": SECRET,
            "TRITON_INTERPRET": "1",
        }
        suite = world["home"] / "suite" / "attack_suite.py"
        proc = subprocess.run(
            [sys.executable, "-c", _PARENT, str(suite)], env=trusted, cwd=top,
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        _no_trace_of_the_attack(world, proc)
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    left = _left_behind()
    assert not left, f"processes of sandbox uids outlived the run: {left}"


def _left_behind() -> list[str]:
    """The processes of sandbox uids no live sandbox on this host holds, each looked at
    while this test holds its lease: this test's runner has exited, so a process of its
    uids outlived its run. A uid still leased is another run's (another test worker's
    build, say), whose processes are alive by right."""
    import fcntl

    from kernelwatch.harness.isolation import sandbox

    left = []
    for uid in sandbox.UID_POOL:
        fd = os.open(sandbox._lock_dir() / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            left += _processes_of(uid)
        except BlockingIOError:
            continue
        finally:
            os.close(fd)
    return left


def test_a_worker_whose_home_is_the_root_is_told_where_prefect_may_keep_its_database(readable):
    """A container started with ``--user`` and no account runs with ``HOME=/``, where the
    worker cannot make Prefect's home: the flow command says so in one line, before Prefect
    starts (it used to wait out a 120 s start-up timeout, then print a page of tracebacks)."""
    _, python = readable
    proc = subprocess.run(
        [shutil.which("setpriv"), f"--reuid={UID}", f"--regid={UID}", "--clear-groups",
         "--inh-caps=-all", "--bounding-set=-all", "--", str(python), "-m", "kernelwatch.cli",
         "nightly"],
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/", "COLUMNS": "200"},
        cwd="/", capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        "error: Prefect's local API keeps its database in /.prefect, which cannot be written "
        "here: set PREFECT_HOME to a writable directory, or PREFECT_API_URL to a Prefect server"
    ]
