"""Kernel code run where nothing is worth taking: the runner split (issue 29).

The process that reads a commit's kernels' results (a Prefect flow, ``kernelwatch check``)
holds the database password and the Prefect credentials; the kernels themselves are
untrusted. With ``KERNELWATCH_RUNNER_DIR`` naming an *exchange* directory, no child that
imports kernel code starts beside those credentials. :meth:`Sandbox.command
<kernelwatch.harness.isolation.sandbox.Sandbox.command>` starts a *proxy* instead (this module,
``proxy``), which hands the child's command to a *runner* in another container or pod, one
that holds no secret and has no network (``kernelwatch runner serve``, :func:`serve`):

- the proxy writes a job (argv, the child's allow-listed environment, its stdin as it
  comes) under ``EXCHANGE/requests/jobs/<id>/``, then relays the runner's
  ``EXCHANGE/results/<id>/{stdout,stderr}`` to its own as they grow and exits the way the
  child did, so ``child.py`` and ``supervise.py`` read it exactly as a local child (its
  timeouts, kills and restarts keep working). Told to stop (SIGTERM), it asks the runner to
  kill the job (a ``kill`` file); while it lives it touches ``alive``, and a job whose
  proxy stopped touching it is killed too (a proxy killed with SIGKILL writes nothing).
- the runner starts only kernelwatch's own child entry points (:data:`ENTRY_POINTS`), in
  its own local sandbox, under its own Python; anything else is refused with one line.

``requests/`` is written by the trusted side alone and mounted read-only in the runner;
``results/`` is written by the runner alone and read-only on the trusted side. Both are
mounted at the same path on both sides, so the staged suite trees (under
``requests/trees/``, where the trusted side's sandbox roots go) have the same paths for
both. What the runner can still do, docs/SECURITY.md says: misreport its own cases, never
reach a credential or change how a verdict is computed or posted.

Nothing here imports kernel code; the proxy imports nothing outside the standard library and
``exchange.py`` (the trusted side's half, which the sandbox uses to start proxies).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, NoReturn

from kernelwatch.harness.isolation import preload
from kernelwatch.harness.isolation.exchange import RUNNER_ENV

#: A job's child: started by ``exec``, or forked by a preload server.
Process = subprocess.Popen[bytes] | preload.Forked
#: The modules a job may run (``python -m MODULE``, nothing before or after): the children
#: kernelwatch itself starts in a sandbox. A profiler's wrapper (the self-check's, trusted
#: code only) is not among them: it runs locally or not at all.
ENTRY_POINTS = frozenset(
    {
        "kernelwatch.harness.isolation.kernel_child",
        "kernelwatch.harness.build.worker",
        "kernelwatch.harness.distributed.rank",
    }
)
#: The most a job may write on stdout (its signed channel): a hostile kernel must not fill
#: the results volume. Past it the job is killed.
STDOUT_CAP = 256 << 20
#: The most of a job's stderr written to its results as it comes; past it only the last
#: ``STDERR_TAIL`` bytes are kept and written at the end (``child.py`` keeps a tail too).
STDERR_CAP = 4 << 20
STDERR_TAIL = 64 << 10
#: How often a live proxy touches its job's ``alive`` file, and how long the runner waits
#: for a touch before it takes the proxy for dead and kills the job.
HEARTBEAT_S = 1.0
ORPHAN_S = 15.0
#: How long a proxy waits for a runner to take its job, and for the job's end once it asked
#: for a kill (less than ``child.REAP_GRACE_S``, after which the proxy is SIGKILLed).
ACCEPT_TIMEOUT_S = 60.0
KILL_WAIT_S = 8.0
#: How long the runner lets a job's reaper end it (SIGTERM) before killing its group.
REAP_GRACE_S = 5.0
POLL_S = 0.02
#: Exit code of a job the runner refused (the reason is its stderr's only line).
REFUSED = 126
#: Where a runner must find no secret: compose's and Kubernetes' secret mounts, the
#: service-account token (checked by :func:`check_holds_nothing`).
SECRET_PATHS = (Path("/run/secrets"), Path("/var/run/secrets/kubernetes.io"))
_DATABASE_URL = re.compile(r"postgres(ql)?(\+\w+)?://|^\s*url\s*=", re.IGNORECASE | re.MULTILINE)


# --- the proxy (trusted side) ---


class _Proxy:
    def __init__(self, exchange: Path, argv: Sequence[str]) -> None:
        self.id = uuid.uuid4().hex
        jobs = exchange / "requests" / "jobs"
        jobs.mkdir(parents=True, exist_ok=True)
        self.job = jobs / self.id
        self.results = exchange / "results" / self.id
        self.kill_at: float | None = None
        staging = jobs / f".{self.id}.tmp"
        # This side's and the runner's only (it reads as root): a job's children run as
        # other uids, and must not read another job's plan or channel key from here.
        staging.mkdir(mode=0o700)
        os.chmod(staging, 0o700)  # whatever the umask
        spec = {"argv": list(argv), "env": dict(os.environ)}
        (staging / "job.json").write_text(json.dumps(spec))
        (staging / "alive").touch()
        self.stdin = open(staging / "stdin", "wb")  # noqa: SIM115 (closed by the feeder)
        staging.rename(self.job)  # the runner sees a job whole or not at all

    def feed_stdin(self) -> None:
        """Copy this process's stdin into the job as it comes; mark its end."""
        with self.stdin:
            # os.read, not sys.stdin: a thread blocked in a buffered read would abort the
            # interpreter's shutdown (a build worker's stdin stays open to the end).
            for chunk in iter(lambda: os.read(0, 1 << 16), b""):
                self.stdin.write(chunk)
                self.stdin.flush()
        with contextlib.suppress(FileNotFoundError):
            (self.job / "stdin.end").touch()

    def ask_kill(self, signum: int, frame: object) -> None:
        if self.kill_at is None:
            self.kill_at = time.monotonic()
            with contextlib.suppress(FileNotFoundError):
                (self.job / "kill").touch()

    def relay(self) -> int:
        """Relay the job's output until it ends; its exit code (negative: a signal)."""
        outputs: dict[str, IO[bytes]] = {}
        sinks = {"stdout": sys.stdout.buffer, "stderr": sys.stderr.buffer}
        started, beat = time.monotonic(), 0.0
        try:
            while True:
                now = time.monotonic()
                if now - beat >= HEARTBEAT_S:
                    with contextlib.suppress(FileNotFoundError):
                        os.utime(self.job / "alive")
                    beat = now
                finished = (self.results / "exit").is_file()
                for name, sink in sinks.items():
                    if name not in outputs:
                        with contextlib.suppress(FileNotFoundError):
                            outputs[name] = open(self.results / name, "rb")  # noqa: SIM115
                    if name in outputs:
                        _copy_available(outputs[name], sink)
                if finished:
                    return int((self.results / "exit").read_text().strip() or "1")
                if not self.results.exists() and now - started > ACCEPT_TIMEOUT_S:
                    sys.stderr.write(
                        f"kernelwatch runner: no runner took job {self.id} in "
                        f"{ACCEPT_TIMEOUT_S:.0f} s: is `kernelwatch runner serve` running on "
                        f"{self.job.parent.parent}?\n"
                    )
                    return 125
                if self.kill_at is not None and now - self.kill_at > KILL_WAIT_S:
                    return -signal.SIGTERM
                time.sleep(POLL_S)
        finally:
            for stream in outputs.values():
                stream.close()
            shutil.rmtree(self.job, ignore_errors=True)  # the runner then drops the results


def _copy_available(source: IO[bytes], sink: IO[bytes]) -> None:
    while chunk := source.read(1 << 20):
        sink.write(chunk)
    sink.flush()


def proxy(exchange: Path, argv: Sequence[str]) -> NoReturn:
    """Run ``argv`` in the runner of ``exchange``: its stdin, stdout and stderr are this
    process's, and this process ends the way it did (a signal's death is passed on)."""
    job = _Proxy(exchange, argv)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, job.ask_kill)
    threading.Thread(target=job.feed_stdin, daemon=True).start()
    code = job.relay()
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:  # die of the same signal, so child.death() names it
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)  # not a shutdown: the stdin thread may still be blocked in its read


# --- the runner (no secrets, no network) ---


class RunnerRefused(RuntimeError):
    """The runner holds something worth taking; the message says what."""


def check_holds_nothing(
    environ: Mapping[str, str],
    secret_paths: Sequence[Path] = SECRET_PATHS,
    config_files: Sequence[Path] | None = None,
) -> None:
    """Refuse (:class:`RunnerRefused`, one line) to serve from a process that holds a
    secret kernel code could take: a variable named like one (``sandbox.SECRET_NAME``), a
    file under a secrets mount or a service-account token, a kernelwatch configuration with
    a database URL (``KERNELWATCH_CONFIG``, ``./kernelwatch.toml`` unless ``config_files``)."""
    from kernelwatch.harness.isolation.sandbox import SECRET_NAME

    named = sorted(name for name, value in environ.items() if value and SECRET_NAME.search(name))
    if named:
        raise RunnerRefused(f"the runner's environment holds {', '.join(named)}: a runner "
                            "must hold no secret (docs/SECURITY.md)")  # fmt: skip
    for root in secret_paths:
        found = [p for p in sorted(root.rglob("*")) if p.is_file()] if root.is_dir() else []
        if found:
            raise RunnerRefused(f"the runner can read {found[0]} ({len(found)} file(s) under "
                                f"{root}): mount no secret into it")  # fmt: skip
    if config_files is None:
        named_config = environ.get("KERNELWATCH_CONFIG")
        config_files = [Path(p) for p in (named_config, "kernelwatch.toml") if p]
    for path in config_files:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if _DATABASE_URL.search(path.read_text()):
                raise RunnerRefused(f"{path} holds a database URL: the runner needs no "
                                    "kernelwatch configuration")  # fmt: skip


def allowed_module(argv: Any) -> str:
    """The entry point ``argv`` runs (``PYTHON -m MODULE``); ValueError for anything else."""
    if (
        not isinstance(argv, list)
        or len(argv) != 3
        or not all(isinstance(a, str) for a in argv)
        or argv[1] != "-m"
        or argv[2] not in ENTRY_POINTS
    ):
        shown = json.dumps(argv)[:200]
        raise ValueError(f"not one of kernelwatch's child entry points: {shown}")
    return argv[2]


@dataclass
class _Job:
    id: str
    request: Path
    result: Path
    proc: Process | None = None
    killed: str = ""
    done: threading.Event = field(default_factory=threading.Event)


def claim(job: _Job) -> bool:
    """Make the job's results directory, the claim that one runner runs it (False: another
    did). It is the job's requester's, as its request directory is, and no one else's: the
    children of other jobs run as other uids and cannot read its output."""
    try:
        job.result.mkdir(mode=0o700)
    except FileExistsError:
        return False
    os.chmod(job.result, 0o700)
    with contextlib.suppress(OSError):  # the request went meanwhile: its proxy reads nothing
        owner = job.request.stat()
        if (owner.st_uid, owner.st_gid) != (os.geteuid(), os.getegid()):
            os.chown(job.result, owner.st_uid, owner.st_gid)
    return True


@dataclass
class Runner:
    """Serve the jobs of ``requests`` (read-only here) into ``results``, each in a local
    sandbox of this container, several at once (a build stage runs workers in parallel)."""

    requests: Path
    results: Path
    stdout_cap: int = STDOUT_CAP
    orphan_s: float = ORPHAN_S
    #: Set once :func:`check_holds_nothing` passed (:func:`serve`): jobs may then run where
    #: no namespace can be made (``sandbox.contained``), since nothing here is worth taking.
    contained: str = ""
    jobs: dict[str, _Job] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)

    def serve(self) -> None:
        """Take jobs until :attr:`stopping` is set; then kill the running ones."""
        self.results.mkdir(parents=True, exist_ok=True)
        try:
            while not self.stopping.is_set():
                self.poll()
                self.stopping.wait(POLL_S * 5)
        finally:
            for job in list(self.jobs.values()):
                job.killed = job.killed or "the runner stopped"
            for job in list(self.jobs.values()):
                job.done.wait(REAP_GRACE_S * 2)

    def poll(self) -> None:
        """Start the new jobs; forget (and delete the results of) those whose proxy is gone."""
        jobs = self.requests / "jobs"
        present = {p.name for p in jobs.iterdir()} if jobs.is_dir() else set()
        for name in sorted(present):
            if name.startswith(".") or name in self.jobs:
                continue
            job = _Job(name, jobs / name, self.results / name)
            if not claim(job):
                continue
            self.jobs[name] = job
            threading.Thread(target=self._run, args=(job,), daemon=True).start()
        for name, job in list(self.jobs.items()):
            if name not in present and job.done.is_set():
                shutil.rmtree(job.result, ignore_errors=True)
                del self.jobs[name]

    def _run(self, job: _Job) -> None:
        try:
            try:
                spec = json.loads((job.request / "job.json").read_text())
                module = allowed_module(spec.get("argv"))
                env = spec.get("env")
                if not isinstance(env, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in env.items()
                ):
                    raise ValueError("its environment is not a mapping of strings")
            except (OSError, ValueError, AttributeError) as exc:
                _refuse(job, f"refused job {job.id}: {exc}")
                return
            from kernelwatch.harness.isolation.sandbox import SandboxError, contained, sandbox

            try:
                # Per job thread: the permission is a context variable, and a new thread
                # starts without the serving thread's.
                allowed = contained(self.contained) if self.contained else contextlib.nullcontext()
                with allowed, sandbox() as box:
                    # The staged suites and the import path the job names: a child's view
                    # may cover the directories they are in.
                    box.exposed.add(str(self.requests / "trees"))
                    box.exposed.update(
                        p for p in env.get("PYTHONPATH", "").split(os.pathsep) if os.path.isdir(p)
                    )
                    code = self._execute(job, module, box.env(source=env), box)
            except SandboxError as exc:
                _refuse(job, f"cannot sandbox job {job.id} here: {exc}")
                return
            except Exception as exc:  # a job must end with an exit, or its proxy waits
                _refuse(job, f"job {job.id} could not run: {type(exc).__name__}: {exc}")
                return
            _finish(job, code)
            _log(
                f"job {job.id}: {module} ended with {code}"
                + (f" ({job.killed})" if job.killed else "")
            )
        finally:
            job.done.set()

    def _execute(self, job: _Job, module: str, env: dict[str, str], box: Any) -> int:
        """Run one allowed job to its end; its exit code."""
        stdout = open(job.result / "stdout", "wb")  # noqa: SIM115 (closed below)
        stderr = open(job.result / "stderr", "wb")  # noqa: SIM115
        try:
            # This runner's own Python, whatever path the trusted side's argv named; forked
            # by the preload server of the module where it can be, as the parent's would be.
            argv = [sys.executable, "-m", module]
            proc: Process | None = None
            if preload.enabled():
                proc = preload.start(module, box.launch(argv), env, str(box.home))
            if proc is None:
                proc = subprocess.Popen(
                    box.command(argv),
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    env=env, cwd=box.home, start_new_session=True,
                )  # fmt: skip
            job.proc = proc
            assert proc.stdin and proc.stdout and proc.stderr
            threads = [
                threading.Thread(target=self._feed, args=(job, proc.stdin), daemon=True),
                threading.Thread(target=self._stdout, args=(job, proc.stdout, stdout)),
                threading.Thread(target=_stderr, args=(proc.stderr, stderr)),
            ]
            for thread in threads:
                thread.start()
            while proc.poll() is None:
                if job.killed or (job.request / "kill").exists():
                    _terminate(proc)
                    break
                job.killed = self._orphaned(job)
                time.sleep(POLL_S * 5)
            code = proc.wait()
            for thread in threads[1:]:
                thread.join(timeout=REAP_GRACE_S)
            if job.killed:
                stderr.write(f"\nkernelwatch runner: {job.killed}\n".encode())
            return code
        finally:
            stdout.close()
            stderr.close()

    def _orphaned(self, job: _Job) -> str:
        """Why the job must be killed although its proxy did not ask: "" when it need not."""
        if self.stopping.is_set():
            return "the runner stopped"
        try:
            age = time.time() - (job.request / "alive").stat().st_mtime
        except FileNotFoundError:
            return "its proxy went away"
        return f"its proxy stopped answering for {age:.0f} s" if age > self.orphan_s else ""

    def _feed(self, job: _Job, sink: IO[bytes]) -> None:
        """Follow the job's stdin file into the child's stdin; close it at the end mark."""
        stdin = job.request / "stdin"
        with contextlib.suppress(OSError, ValueError), sink, open(stdin, "rb") as source:
            while job.proc is not None and job.proc.poll() is None:
                ended = (job.request / "stdin.end").exists()
                chunk = source.read(1 << 16)
                if chunk:
                    sink.write(chunk)
                    sink.flush()
                elif ended:
                    return
                else:
                    time.sleep(POLL_S)

    def _stdout(self, job: _Job, source: IO[bytes], sink: IO[bytes]) -> None:
        written = 0
        with source:
            for chunk in iter(lambda: source.read1(1 << 16), b""):
                room = self.stdout_cap - written
                sink.write(chunk[: max(room, 0)])
                sink.flush()
                written += len(chunk)
                if written > self.stdout_cap and not job.killed:
                    job.killed = f"killed: it wrote more than {self.stdout_cap} bytes on stdout"


def _stderr(source: IO[bytes], sink: IO[bytes]) -> None:
    """Copy stderr as it comes up to ``STDERR_CAP``; of the rest keep only the tail."""
    written, dropped, kept = 0, 0, bytearray()
    with source:
        for chunk in iter(lambda: source.read1(1 << 16), b""):
            if written + len(chunk) <= STDERR_CAP:
                sink.write(chunk)
                sink.flush()
                written += len(chunk)
                continue
            kept += chunk
            if len(kept) > STDERR_TAIL:
                dropped += len(kept) - STDERR_TAIL
                del kept[:-STDERR_TAIL]
    if kept or dropped:
        sink.write(f"\n[kernelwatch runner: {dropped} bytes of stderr dropped]\n".encode())
        sink.write(bytes(kept))
        sink.flush()


def _terminate(proc: Process) -> None:
    """End a job the way ``child.kill`` ends a child, with this runner's shorter grace."""
    from kernelwatch.harness.isolation.child import terminate  # child.py imports this module's user

    terminate(proc, REAP_GRACE_S)


def _log(line: str) -> None:
    """One line on the runner's stderr: what it ran or refused, for its operator."""
    sys.stderr.write(f"runner: {line}\n")
    sys.stderr.flush()


def _refuse(job: _Job, message: str) -> None:
    _log(message)
    (job.result / "stdout").write_bytes(b"")
    (job.result / "stderr").write_text(f"kernelwatch runner: {message}\n")
    _finish(job, REFUSED)


def _finish(job: _Job, code: int) -> None:
    """Publish the exit code last, atomically: the proxy drains the output once it exists."""
    (job.result / "exit.tmp").write_text(str(code))
    (job.result / "exit.tmp").rename(job.result / "exit")


def serve(
    requests: Path,
    results: Path,
    *,
    environ: Mapping[str, str] | None = None,
    secret_paths: Sequence[Path] = SECRET_PATHS,
    config_files: Sequence[Path] | None = None,
    stdout_cap: int = STDOUT_CAP,
) -> None:
    """Check that this process holds nothing worth taking (:func:`check_holds_nothing`),
    then serve ``requests`` into ``results`` until SIGTERM or SIGINT."""
    environ = os.environ if environ is None else environ
    if environ.get(RUNNER_ENV):
        raise RunnerRefused(f"the runner's environment sets {RUNNER_ENV}: it would hand its "
                            "jobs on instead of sandboxing them here")  # fmt: skip
    check_holds_nothing(environ, secret_paths, config_files)
    _log(_scratch_line(environ))
    why = ("the runner was checked to hold no secret at start (harness/isolation/remote.py); its "
           "network is cut by the deployment (network_mode none, the kernelwatch-runner "
           "NetworkPolicy)")  # fmt: skip
    runner = Runner(requests.resolve(), results.resolve(), stdout_cap=stdout_cap, contained=why)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: runner.stopping.set())
    runner.serve()


def _scratch_line(environ: Mapping[str, str]) -> str:
    """What caps a job's disk here, for the operator; raises :class:`RunnerRefused` when the
    scratch filesystems named are not filesystems of their own."""
    from kernelwatch.harness.isolation.sandbox import SCRATCH_ENV, SandboxError, scratch_spaces

    value = environ.get(SCRATCH_ENV)
    if not value:
        return (f"no scratch filesystems ({SCRATCH_ENV} unset): jobs share "
                f"{tempfile.gettempdir()}, and one can fill another's disk")  # fmt: skip
    try:
        spaces = scratch_spaces(Path(value))
    except SandboxError as exc:
        raise RunnerRefused(str(exc)) from exc
    sizes = sorted({shutil.disk_usage(space).total / 2**30 for space in spaces})
    size = f"{sizes[0]:.1f}" if len(sizes) == 1 else f"{sizes[0]:.1f} to {sizes[-1]:.1f}"
    return f"each job's scratch is one of {len(spaces)} filesystems of {value}, {size} GiB each"


def main(argv: Sequence[str]) -> int:
    """``python -m kernelwatch.harness.isolation.remote proxy EXCHANGE -- ARGV...``."""
    if len(argv) < 3 or argv[0] != "proxy" or argv[2] != "--":
        sys.stderr.write(
            "usage: python -m kernelwatch.harness.isolation.remote proxy EXCHANGE -- ARGV\n"
        )
        return 2
    proxy(Path(argv[1]), argv[3:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
