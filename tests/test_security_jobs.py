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
