"""Nothing of one job outlives it where no namespace can be made (issue 46, item 1): the
deployed runner's container has no CAP_SYS_ADMIN, so its jobs run *contained* (a leased uid,
no PID, mount or network namespace of their own). There a process that forks and exits in a
loop (a "comet"), a double-forked ``setsid`` daemon and a fork bomb are all gone when the
job's sandbox ends, the reaper's own runtime is bounded, and the next job gets another uid.

Each test runs a job as the runner's container runs it: root dropping to a leased uid, under
``jail.py``'s reaper with neither a PID nor a mount namespace (``Sandbox(namespaces=False)``),
its kernel code a system Python the sandbox user can read."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from contained import contained_sandbox

from kernelwatch.harness.isolation import jail
from kernelwatch.harness.isolation import sandbox as sandbox_module
from kernelwatch.harness.isolation.child import spawn, tail, wait
from kernelwatch.harness.isolation.sandbox import Launch, Sandbox, leased_identity

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="leased uids need root")

#: A Python every uid can run: the test's own may live under root's private home.
SYSTEM_PYTHON = "/usr/bin/python3"

#: How each job ends once what it started has marked argv[1]: with exit code 3.
EXIT_WHEN_MARKED = """
while not os.path.exists(sys.argv[1]) or not os.path.getsize(sys.argv[1]):
    time.sleep(0.01)
sys.exit(3)
"""

#: Forks a comet (a process that forks and exits in a loop, so it is never the same pid
#: twice, for a minute), detached from every descriptor the job has; the job itself then
#: exits 3. The comet's first pid is written to argv[1].
COMET = (
    """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    with open(sys.argv[1], "w") as out:
        out.write(str(os.getpid()))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.fork():
            os._exit(0)
    os._exit(0)
"""
    + EXIT_WHEN_MARKED
)

#: A double-forked daemon in a session of its own that sleeps for five minutes; the job
#: exits 3 once it runs.
DAEMON = (
    """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        with open(sys.argv[1], "w") as out:
            out.write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
"""
    + EXIT_WHEN_MARKED
)

#: Each process forks two more and sleeps, until the process limit refuses a fork; the job
#: exits 3 once the bomb has met the limit.
BOMB = (
    """
import os, sys, time
def grow():
    for _ in range(2):
        try:
            if os.fork() == 0:
                grow()
                time.sleep(300)
                os._exit(0)
        except OSError:
            with open(sys.argv[1], "a") as out:
                out.write("full")
            return
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
if os.fork() == 0:
    grow()
    time.sleep(300)
    os._exit(0)
"""
    + EXIT_WHEN_MARKED
)


class SmallBox(Sandbox):
    """The runner's sandbox with a process limit a 2-core machine can reach in a test (the
    jail's spec carries it; ``jail.PROCESS_LIMIT`` is the deployed one)."""

    def launch(self, argv: list[str], own_pids: bool = True) -> Launch:
        launch = super().launch(argv, own_pids)
        return dataclasses.replace(launch, spec={**launch.spec, "nproc": BOMB_LIMIT})


#: The process limit of the bomb's sandbox.
BOMB_LIMIT = 300


@contextlib.contextmanager
def contained_job() -> Iterator[tuple[Sandbox, int]]:
    """A job's sandbox as the runner's container makes it (a leased uid, no namespaces),
    with its lease: the lease ends with the block."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON} for the sandbox user to run")
    with contained_sandbox(SmallBox) as box:
        assert box.identity is not None
        yield box, box.identity.uid


def run_job(box: Sandbox, code: str) -> float:
    """Run ``code`` as the job's child through the supervisor's ``spawn`` (it must exit 3):
    how long its reaper took to end after the child's output closed."""
    with tempfile.TemporaryFile(mode="w+b") as stderr:
        proc, events = spawn(
            "unused", {}, stderr, box, wrapper=[SYSTEM_PYTHON, "-c", code, "marker"]
        )
        assert events.get(timeout=120) is None, tail(stderr)
        start = time.monotonic()
        assert wait(proc) == 3, tail(stderr)
        return time.monotonic() - start


@pytest.mark.parametrize(
    "name, code", [("comet", COMET), ("setsid daemon", DAEMON), ("fork bomb", BOMB)]
)
def test_nothing_a_contained_job_started_outlives_its_sandbox(name, code):
    with contained_job() as (box, uid):
        reaped_in = run_job(box, code)
        # The reaper gives up on what it cannot catch within its bound; the lease does not.
        assert reaped_in < jail.REAPER_WITHIN_S + 5, f"{name}: the reaper ran {reaped_in:.1f} s"
    left = jail.live_processes(uid)
    assert not left, f"{name}: processes of uid {uid} outlived the job's sandbox: {left}"


def test_the_next_job_gets_another_uid():
    """The uid just released is not the next one leased: had anything of the last job
    escaped, it would not meet the next."""
    with leased_identity() as first:
        assert first is not None
    with leased_identity() as second:
        assert second is not None
    assert second.uid != first.uid


def test_a_lease_ends_what_a_holder_killed_outright_left_behind(monkeypatch):
    """A worker killed with SIGKILL never releases its lease in order: the processes of its
    children stay. The next lease of that uid ends them before its own children start."""
    script = (
        "import subprocess, time\n"
        "from kernelwatch.harness.isolation.sandbox import leased_identity\n"
        "with leased_identity() as who:\n"
        "    left = subprocess.Popen(['sleep', '300'], user=who.uid, group=who.gid,\n"
        "                            extra_groups=[], start_new_session=True)\n"
        "    print(who.uid, left.pid, flush=True)\n"
        "    time.sleep(300)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    uid, left_pid = map(int, holder.stdout.readline().split())
    holder.kill()
    holder.wait()
    try:
        assert left_pid in jail.live_processes(uid)
        # The rotation comes back to it (after a thousand leases, or now): only to it, so
        # that another test worker's lease meanwhile cannot move this one elsewhere.
        monkeypatch.setattr(sandbox_module, "_rotation", lambda locks: [uid])
        with leased_identity() as identity:
            assert identity is not None and identity.uid == uid
            assert left_pid not in jail.live_processes(uid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(left_pid, 9)


def test_a_job_cannot_read_another_jobs_plan_key_or_results():
    """Issue 46: without a mount namespace every child saw ``requests/jobs/<id>/`` (0755,
    ``job.json`` and ``stdin`` 0644: another job's plan and channel key) and other jobs'
    live results. Now each job's request and results are its requester's and the runner's
    only; a job's child (another leased uid) is refused both."""
    from kernelwatch.harness.isolation import remote

    exchange = Path(tempfile.mkdtemp(prefix="kw-exchange-"))
    try:
        os.chmod(exchange, 0o755)
        proxy = remote._Proxy(exchange, [sys.executable, "-m", sorted(remote.ENTRY_POINTS)[0]])
        proxy.stdin.write(b'{"key": "the channel key of this job"}\n')
        proxy.stdin.close()
        (exchange / "results").mkdir(mode=0o755)
        job = remote._Job(proxy.id, proxy.job, proxy.results)
        assert remote.claim(job) and not remote.claim(job)  # one runner per job
        (job.result / "stdout").write_bytes(b"this job's records\n")
        with leased_identity() as other:
            assert other is not None
            for path in (proxy.job / "job.json", proxy.job / "stdin", job.result / "stdout"):
                read = subprocess.run(
                    ["cat", str(path)], user=other.uid, group=other.gid, extra_groups=[],
                    capture_output=True, text=True, check=False,
                )  # fmt: skip
                assert read.returncode != 0 and "Permission denied" in read.stderr, path
                assert not read.stdout, path
    finally:
        shutil.rmtree(exchange, ignore_errors=True)


#: A job that writes into its ``TMPDIR`` until its disk refuses: exit 3 when refused for want
#: of space, 4 when it wrote 64 MiB unrefused.
FILL = """
import errno, os, sys
written = 0
try:
    with open(os.path.join(os.environ["TMPDIR"], "fill"), "wb") as out:
        while written < 64 << 20:
            out.write(b"x" * (1 << 16))
            out.flush()
            written += 1 << 16
except OSError as exc:
    sys.exit(3 if exc.errno == errno.ENOSPC else 5)
sys.exit(4)
"""
#: A job that writes 2 MiB into its ``TMPDIR``, its home and Triton's cache: exit 3 when all
#: were written.
WRITE = """
import os, sys
for name in ("TMPDIR", "HOME", "TRITON_CACHE_DIR"):
    with open(os.path.join(os.environ[name], "out"), "wb") as out:
        out.write(b"y" * (2 << 20))
sys.exit(3)
"""
#: The size of each scratch filesystem the test mounts.
SCRATCH_MIB = 8


@pytest.fixture
def scratch(monkeypatch) -> Iterator[Path]:
    """``KERNELWATCH_SCRATCH`` with two size-capped tmpfs, mounted as the runner's
    orchestrator mounts them (compose ``tmpfs``, Kubernetes memory ``emptyDir``): the test
    stands in for it with ``mount``, which the runner itself never needs."""
    parent = Path(tempfile.mkdtemp(prefix="kw-scratch-"))
    os.chmod(parent, 0o755)
    mounted = []
    try:
        for name in ("0", "1"):
            (parent / name).mkdir()
            done = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={SCRATCH_MIB}m,mode=0711", "tmpfs",
                 str(parent / name)],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if done.returncode != 0:
                pytest.skip(f"cannot mount the test's scratch tmpfs: {done.stderr.strip()}")
            mounted.append(parent / name)
        monkeypatch.setenv(sandbox_module.SCRATCH_ENV, str(parent))
        yield parent
    finally:
        for path in mounted:
            subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(parent, ignore_errors=True)


def test_a_job_that_fills_its_disk_leaves_the_concurrent_job_room(scratch, monkeypatch):
    """Issue 46: the runner's ``/tmp`` was one tmpfs for all its jobs, so the pull request's
    side could give the other side ENOSPC. Now each sandbox (home, ``TMPDIR``, Triton's cache)
    is on a scratch filesystem of its own: a contained job (a leased uid, no namespaces, the
    runner's permission) that writes until its disk is full is refused at its own cap, and
    a job whose sandbox is leased beside it, while the full one is still held, writes its
    files; both filesystems are empty once their sandboxes end."""
    if not Path(SYSTEM_PYTHON).exists():
        pytest.skip(f"no {SYSTEM_PYTHON} for the sandbox user to run")
    monkeypatch.setattr(sandbox_module, "namespaces_available", lambda: False)
    # The jobs run the system Python (run_job's wrapper), not this test's, which may live
    # under root's private home: the check that the sandbox user can read this one is moot.
    monkeypatch.setattr(sandbox_module, "_check_environment_readable", lambda *_: None)
    with sandbox_module.contained("the test's runner"), sandbox_module.sandbox() as filler:
        assert filler.root.is_relative_to(scratch) and filler.identity is not None
        run_job(filler, FILL)  # refused: ENOSPC
        assert (filler.root / "tmp" / "fill").stat().st_size <= SCRATCH_MIB << 20
        with sandbox_module.sandbox() as writer:
            assert writer.root.is_relative_to(scratch)
            assert writer.root.parent != filler.root.parent
            run_job(writer, WRITE)
    for space in (scratch / "0", scratch / "1"):
        assert [p.name for p in space.iterdir()] == [sandbox_module.SCRATCH_LOCK]


def test_scratch_filesystems_are_leased_one_a_sandbox_and_emptied_of_what_a_holder_left(
    scratch, monkeypatch
):
    """A lease empties its filesystem on the way in (a holder killed outright left files) and
    out; with every filesystem held, a sandbox waits, then says what to mount."""
    (scratch / "0" / "left-by-a-killed-holder").write_bytes(b"x" * 4096)
    monkeypatch.setattr(sandbox_module, "SCRATCH_WAIT_S", 0.3)
    with sandbox_module.scratch_space() as first, sandbox_module.scratch_space() as second:
        assert {first, second} == {scratch / "0", scratch / "1"}
        assert [p.name for p in first.iterdir()] == [sandbox_module.SCRATCH_LOCK]
        assert first.stat().st_mode & 0o777 == 0o711
        (second / "work").mkdir()
        third = sandbox_module.scratch_space()
        with pytest.raises(sandbox_module.SandboxError, match="all 2 scratch filesystems"):
            third.__enter__()
    assert [p.name for p in second.iterdir()] == [sandbox_module.SCRATCH_LOCK]


def test_a_scratch_directory_that_is_not_a_filesystem_of_its_own_is_refused(tmp_path):
    (tmp_path / "0").mkdir()
    with pytest.raises(sandbox_module.SandboxError, match="not one of its own"):
        sandbox_module.scratch_spaces(tmp_path)
    with pytest.raises(sandbox_module.SandboxError, match="no scratch filesystems"):
        sandbox_module.scratch_spaces(tmp_path / "0")
