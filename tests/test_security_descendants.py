"""Nothing kernel code starts outlives its child, and the child cannot exhaust the host
(issue 29, item 3): a process that double-forked and called ``setsid`` is killed when the
child ends or is killed, a file may not grow past ``jail.FILE_LIMIT``, and no more than
``child.STDERR_CAP`` of stderr is ever kept."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from kernelwatch.harness.isolation.child import STDERR_CAP, STDERR_TAIL, kill, spawn, tail, wait
from kernelwatch.harness.isolation.sandbox import Sandbox, sandbox
from kernelwatch.harness.isolation.supervise import CheckRequest, run_checks
from kernelwatch.harness.suite import SuiteRef

ESCAPE = Path(__file__).parent / "planted" / "escape_suite.py"
#: A shell command that leaves a ``sleep 300`` in a session of its own, writes its pid to
#: ``$0`` and returns only once it did (so the sleep is known to have started).
LEAVE_BEHIND = (
    'setsid sh -c \'echo $$ > "$1"; exec sleep 300\' sh "$0" </dev/null >/dev/null 2>&1 & '
    'while [ ! -s "$0" ]; do sleep 0.05; done'
)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for an init that never reaps it
    is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _gone(pid: int, within_s: float = 5.0) -> bool:
    deadline = time.monotonic() + within_s
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture(scope="module")
def escape_run(tmp_path_factory):
    """The escape suite checked once through the real supervisor."""
    suite = tmp_path_factory.mktemp("escape")
    shutil.copy(ESCAPE, suite)
    request = CheckRequest(SuiteRef(str(suite / "escape_suite.py")), case_timeout_s=300)
    return {r.case.kernel: r for r in run_checks(request)}


def _sleeping(argument: str) -> list[int]:
    """The host's pids of the processes running ``sleep ARGUMENT``."""
    wanted = f"sleep\0{argument}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == wanted and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_double_forked_setsid_process_dies_with_its_child(escape_run):
    # Found by its unique argument: the pid the suite sees is its PID namespace's (pid 9 of
    # the sandbox was a kernel thread of the host, alive, in a fresh-clone run).
    record = escape_run["orphan"]
    found = re.search(r"ORPHAN sleep (300\.\d{10})", record.reason + record.detail)
    assert found, record
    deadline = time.monotonic() + 5.0
    while (left := _sleeping(found.group(1))) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"sleep {found.group(1)} (pids {left}) outlived the check"
    assert escape_run["honest"].verdict == "pass"


def test_a_kernel_cannot_write_a_file_past_the_limit(escape_run):
    record = escape_run["big_file"]
    assert record.verdict == "error", record
    # Python ignores SIGXFSZ, so the write fails with EFBIG instead of killing the child.
    assert "File too large" in record.reason, record.reason
    assert escape_run["honest"].verdict == "pass"


def test_a_flood_on_stderr_keeps_only_its_tail_in_the_record(escape_run):
    record = escape_run["shout"]
    assert record.verdict == "error", record
    assert 0 < len(record.detail) <= STDERR_TAIL
    assert escape_run["honest"].verdict == "pass"


def test_a_flood_on_stderr_keeps_at_most_the_cap_on_disk():
    flood = "head -c 100000000 /dev/zero | tr '\\0' x >&2; echo END >&2; exit 4"
    with sandbox() as box, tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn("unused", {}, stderr, box, wrapper=["/bin/sh", "-c", flood])
        while events.get(timeout=120) is not None:
            pass
        assert wait(proc) == 4
        stderr.seek(0, os.SEEK_END)
        assert stderr.tell() <= STDERR_CAP
        assert tail(stderr).endswith("xxxxEND")


@pytest.mark.parametrize("how", ["ends", "is killed"])
def test_without_a_sandbox_user_or_namespaces_nothing_outlives_the_child(tmp_path, how):
    """The path of a worker that is not root on a host without user namespaces: no jail
    user, no PID or mount namespace, only the reaper."""
    (tmp_path / "home").mkdir()
    box = Sandbox(tmp_path, identity=None, namespaces=False)
    pidfile = tmp_path / "pid"
    script = LEAVE_BEHIND + ("; exit 3" if how == "ends" else "; sleep 300")
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn(
            "unused", {}, stderr, box, wrapper=["/bin/sh", "-c", script, str(pidfile)]
        )
        if how == "ends":
            assert events.get(timeout=60) is None
            assert wait(proc) == 3
        else:
            deadline = time.monotonic() + 60
            while not pidfile.exists() or not pidfile.read_text().strip():
                assert time.monotonic() < deadline, "the child never left its sleep behind"
                time.sleep(0.05)
            kill(proc)
    pid = int(pidfile.read_text())
    try:
        assert _gone(pid), f"pid {pid} (sleep 300) outlived its child"
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def test_a_child_sees_no_other_runs_directory_or_process():
    """Every run's children share one sandbox user (finding 4: a process left behind could
    stop later runs' children, read their Triton caches): each child has a PID namespace of
    its own and the temporary directory covered, so another run's directory and processes
    are not there to reach."""
    import subprocess
    import sys

    from kernelwatch.harness.isolation.sandbox import namespaces_available

    if not namespaces_available():
        pytest.skip("no namespaces here: untrusted code is refused instead")
    probe = (
        "import os, sys; print(os.path.exists(sys.argv[1]));"
        "print(len([p for p in os.listdir('/proc') if p.isdigit()]))"
    )
    with sandbox() as first, sandbox() as second:
        other = subprocess.Popen(
            first.command(["sleep", "60"]), env=first.env(), cwd=first.home,
            start_new_session=True,
        )  # fmt: skip
        try:
            seen = subprocess.run(
                second.command([sys.executable, "-c", probe, str(first.root)]),
                env=second.env(), cwd=second.home, capture_output=True, text=True, check=True,
            ).stdout.split()  # fmt: skip
        finally:
            os.killpg(other.pid, 9)
            other.wait()
    assert seen[0] == "False", "another run's sandbox directory is visible"
    assert int(seen[1]) <= 3, f"{seen[1]} processes visible: not only the child's own"


def test_an_endless_line_on_the_result_channel_is_refused_not_buffered(monkeypatch):
    """Kernel code can find the channel's descriptor; one line without an end must cost the
    parent a bounded read, not its memory."""
    import io

    from kernelwatch.harness.isolation import child as child_module
    from kernelwatch.harness.isolation.channel import Forged, Reader, new_key

    monkeypatch.setattr(child_module, "MAX_LINE", 1024)
    items = child_module.event_queue(io.BytesIO(b"x" * 10_000), Reader(new_key()))
    refused = items.get(timeout=10)
    assert isinstance(refused, Forged) and "more than 1024 bytes" in str(refused)
