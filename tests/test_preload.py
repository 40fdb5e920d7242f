"""Children forked by a preload server (``harness/isolation/preload.py``) are the children
``exec`` would have started: the same user, groups, capabilities, limits, namespaces,
environment, descriptors and view of other processes, in each mode the sandbox has; nothing
of the server reaches them; and where a server cannot serve, children start by ``exec``."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from contained import contained_sandbox

from kernelwatch.harness.isolation import jail, preload
from kernelwatch.harness.isolation import sandbox as sandbox_module
from kernelwatch.harness.isolation.child import spawn, wait
from kernelwatch.harness.isolation.sandbox import (
    Sandbox,
    SandboxError,
    namespaces_available,
    sandbox,
)

PROBE = Path(__file__).parent / "planted" / "preload_probe.py"
MODULE = "preload_probe"


def _servers() -> list[int]:
    """The live (not zombie) preload servers this process started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            if int(parent) == os.getpid() and state != "Z" and preload.__name__.encode() in cmdline:
                found.append(int(entry))
    return found


def _probe(box: Sandbox, preloaded: bool, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The probe's facts, started by a preload server (one that imports what a kernel
    child's would) or by ``exec``."""
    monkeypatch.setenv(preload.ENV, "1" if preloaded else "0")
    monkeypatch.setattr(preload, "MODULES", {*preload.MODULES, MODULE})
    folder = box.root / "probe"
    folder.mkdir(exist_ok=True)
    shutil.copy(PROBE, folder / f"{MODULE}.py")
    os.chmod(folder, 0o755)
    os.chmod(folder / f"{MODULE}.py", 0o644)
    env = box.env(extra={"PYTHONPATH": str(folder)})
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn(MODULE, {"plan": 1}, stderr, box, env)
        assert events.get(timeout=120) is None
        code = wait(proc)
        stderr.seek(0)
        text = stderr.read().decode()
    assert code == 0, text
    assert isinstance(proc, preload.Forked) is preloaded
    facts = json.loads(text.split("PROBE ", 1)[1])
    facts["stdin"] = {k: v for k, v in json.loads(facts["stdin"]).items() if k != "key"}
    return facts


def _compare(execd: dict, forked: dict, own_pids: bool) -> None:
    own = {ns: os.readlink(f"/proc/self/ns/{ns}") for ns in execd["namespaces"]}
    for facts in (execd, forked):
        facts["namespaces"] = {ns: link != own[ns] for ns, link in facts["namespaces"].items()}
        if not own_pids:  # every process of the host is in view, and their number moves
            facts.pop("visible_processes")
            facts.pop("pid")
        assert facts["foreign_fds"] == [], facts["foreign_fds"]
    assert forked == execd


@pytest.fixture
def namespaced_box() -> Iterator[Sandbox]:
    if not namespaces_available():
        pytest.skip("no namespaces can be made here")
    with sandbox() as box:
        yield box


@pytest.fixture
def contained_box() -> Iterator[Sandbox]:
    """A job's sandbox as the runner's container makes it: a leased uid, no namespaces."""
    if os.geteuid() != 0:
        pytest.skip("a leased uid needs root")
    with contained_sandbox() as box:
        yield box


def test_a_forked_child_is_the_child_exec_starts_in_namespaces(namespaced_box, monkeypatch):
    execd = _probe(namespaced_box, False, monkeypatch)
    forked = _probe(namespaced_box, True, monkeypatch)
    _compare(execd, forked, own_pids=True)
    assert forked["namespaces"] == {
        "net": True,
        "mnt": True,
        "pid": True,
        "user": os.geteuid() != 0,
    }
    if os.geteuid() == 0:
        assert forked["uid"] == [namespaced_box.identity.uid] * 3
    assert forked["stdin"] == {"plan": 1}
    assert set(forked["fds"].values()) <= {"pipe", "file"}, forked["fds"]


def test_a_contained_forked_child_has_the_leased_users_limits_only(contained_box, monkeypatch):
    forked = _probe(contained_box, True, monkeypatch)
    identity = contained_box.identity
    assert forked["uid"] == [identity.uid] * 3 and forked["gid"] == [identity.gid] * 3
    assert forked["groups"] == [] and forked["no_new_privs"] == "1"
    assert forked["caps"]["CapEff"] == forked["caps"]["CapPrm"] == "0" * 16
    assert forked["limits"]["RLIMIT_NPROC"] == [jail.PROCESS_LIMIT] * 2
    assert forked["limits"]["RLIMIT_FSIZE"] == [jail.FILE_LIMIT] * 2
    assert forked["limits"]["RLIMIT_CORE"] == [0, 0]
    assert forked["dumpable"] == 1 and forked["cwd"] == str(contained_box.home)
    assert forked["env"] == contained_box.env(
        extra={"PYTHONPATH": str(contained_box.root / "probe")}
    )
    assert forked["foreign_fds"] == [] and set(forked["fds"].values()) <= {"pipe", "file"}


def test_a_contained_forked_child_matches_a_contained_execd_one(contained_box, monkeypatch):
    try:
        sandbox_module._check_environment_readable(contained_box.identity, namespaces=False)
    except SandboxError as exc:  # this Python lies under a private directory
        pytest.skip(f"exec cannot start the contained child to compare: {exc}")
    execd = _probe(contained_box, False, monkeypatch)
    _compare(execd, _probe(contained_box, True, monkeypatch), own_pids=False)


def test_a_server_that_died_is_replaced_by_exec(namespaced_box, monkeypatch, capfd):
    _probe(namespaced_box, True, monkeypatch)
    servers = _servers()
    assert servers, "no preload server was started"
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    for pid in servers:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    monkeypatch.setenv(preload.ENV, "1")
    folder = namespaced_box.root / "probe"
    env = namespaced_box.env(extra={"PYTHONPATH": str(folder)})
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn(MODULE, {"plan": 2}, stderr, namespaced_box, env)
        assert events.get(timeout=120) is None
        assert wait(proc) == 0
        stderr.seek(0)
        assert "PROBE " in stderr.read().decode()
    assert not isinstance(proc, preload.Forked)
    assert "could not fork a child" in capfd.readouterr().err


def test_only_a_child_that_imports_torch_is_worth_a_server(namespaced_box, monkeypatch):
    monkeypatch.setenv(preload.ENV, "1")
    before = set(_servers())
    env = namespaced_box.env()
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn("json.tool", {"plan": 3}, stderr, namespaced_box, env)
        assert events.get(timeout=120) is not None  # json.tool echoes the plan, unsigned
        wait(proc)
    assert not isinstance(proc, preload.Forked)
    assert set(_servers()) == before


def test_preloading_off_starts_no_server(namespaced_box, monkeypatch):
    before = set(_servers())
    _probe(namespaced_box, False, monkeypatch)
    assert set(_servers()) == before


def test_a_server_ends_with_its_parents_socket(namespaced_box, monkeypatch):
    _probe(namespaced_box, True, monkeypatch)
    assert _servers()
    preload.stop_servers()
    assert _servers() == []


def test_a_forked_build_child_imports_nothing_of_torch_or_the_compiler_itself():
    """Every build child records launches on the meta device (whose decompositions import
    ``torch._dynamo``, 1.4 s of CPU) and compiles (Triton's code generator): the build
    server imports them once, before it forks, so no child pays for them."""
    script = f"""
import json, sys
from kernelwatch.harness.isolation import preload
preload.preload(preload.BUILD_WORKER)
before = set(sys.modules)
from kernelwatch.harness.build.compiler import build
from kernelwatch.harness.build.plan import plan_builds
from kernelwatch.harness.suite import SuiteRef, load_suite
suite = load_suite(SuiteRef({str(Path(__file__).parent / "planted" / "identity_suite.py")!r}))
jobs = plan_builds(suite, (), "smoke", (), ("sm_90a",)).jobs
print(json.dumps([build(jobs[0], suite.name, None).status, sorted(set(sys.modules) - before)]))
"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # as a build child
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    status, imported = json.loads(out.stdout)
    assert status == "ok", out.stderr[-2000:]
    heavy = ("torch", "triton.compiler", "triton.experimental")
    assert [m for m in imported if m.startswith(heavy)] == []
