"""Where a child that imports a commit's kernels runs: what it can see, who it is, what it
can reach. Kernel code is untrusted (a pull request's may be hostile), so every child gets:

- an environment built from an allow-list (``PATH``, locale, CUDA/Triton/BLAS settings), never
  the worker's: no database URL, Prefect key, Grafana token or webhook reaches it;
- a private directory of its own for ``HOME``, ``TMPDIR``, the XDG directories and Triton's
  cache, removed afterwards, so no cache it writes is read by a later run;
- as root, an unprivileged uid of its own (one of ``UID_POOL``, leased for the sandbox's
  life, so that no other sandbox shares it; or the account ``KERNELWATCH_SANDBOX_USER``
  names), so it can neither read the worker's files nor write its caches, spool or results,
  nor reach another run's (or the other side's) processes and files;
- as a worker that is not root, namespaces of its own (user, mount, PID, network) in which
  ``jail.py`` gives it a read-only view of the system, the Python installation and its suites,
  with nothing of the worker's (home, ``/tmp``, ``/run``, the embedded database, the spool,
  the repositories, the worker's processes) and its own directory the only one it writes;
- no network, through a network namespace.

Untrusted code (a pull request's, a fork's) is refused, in one line that says what is
missing, where those namespaces cannot be made: a child sharing the worker's uid or network
could read its secrets. Such a host runs untrusted code through the runner of the
deployment (``harness/isolation/remote.py``; infra/, docs/SECURITY.md), where nothing is
worth taking.
Trusted code (the built-in suite) may run with less, and the sandbox says what it lacked.
  On a node of a multi-node world (``NNODES`` above 1) the ranks must reach the other nodes,
  so children keep the pod's network, which the multi-node pool's NetworkPolicy limits
  (infra/k8s/multi-node/); everything else holds.

A suite directory the sandbox user cannot read (a checkout under a private directory) is
copied into the private directory first. The Python environment itself must be readable by
that user; :class:`SandboxError` says so otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import getpass
import grp
import json
import os
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.harness.distributed.nodes import ENV as NODES_ENV
from kernelwatch.harness.distributed.nodes import spans_nodes
from kernelwatch.harness.isolation import jail
from kernelwatch.harness.isolation.exchange import exchange_dir, proxy_command, trees_dir
from kernelwatch.harness.suite import SuiteRef, revision_of

USER_ENV = "KERNELWATCH_SANDBOX_USER"
JAIL = "kernelwatch.harness.isolation.jail"
#: The uids sandboxes take, one each, when ``$KERNELWATCH_SANDBOX_USER`` names no account
#: (root only): concurrent sandboxes (the two sides of an A/B pair, two runs on one host)
#: are then different users, so neither can signal, trace or write the other's processes,
#: caches and files even where no namespace can be made. Below 65536, so that a container's
#: user namespace maps them; a uid some account has is skipped.
UID_POOL = range(62000, 63000)
#: Where a GPU host without nvcc finds prebuilt cubins (harness/cuda_kernel.py reads it).
#: Declared here, not there, so that the parents that start children never import torch.
CUBIN_DIR_ENV = "KERNELWATCH_CUBIN_DIR"
#: A directory of scratch filesystems, one a concurrent sandbox: each subdirectory a
#: filesystem of its own with a size cap (a tmpfs the runner's orchestrator mounts: compose
#: ``tmpfs`` entries, Kubernetes ``emptyDir`` volumes of ``medium: Memory`` with a
#: ``sizeLimit``, which need no capability in the container). Each sandbox leases one for its
#: root (home, ``TMPDIR``, Triton's cache), so a job that fills its disk fills its own only.
#: Unset, sandboxes share the temporary directory and one can fill another's.
SCRATCH_ENV = "KERNELWATCH_SCRATCH"
#: How long a sandbox waits for a scratch filesystem to be free before it gives up.
SCRATCH_WAIT_S = 600.0
#: The lock file of a scratch filesystem's lease (held with ``flock``), in it.
SCRATCH_LOCK = ".kernelwatch-lease"
#: Variables a child inherits by name, and by prefix. Anything else is dropped. The prebuilt
#: cubins' folder is how a GPU host without nvcc runs the CUDA C++ kernels.
ALLOWED = frozenset(
    {
        "PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "CC", "CXX",
        "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
        "PYTHONWARNINGS", "PYTHONFAULTHANDLER", *NODES_ENV, CUBIN_DIR_ENV,
    }
)  # fmt: skip
#: NCCL_ and GLOO_: the collectives' tuning (recorded in a world's fabric) and the network
#: interfaces a multi-node world's ranks must use (NCCL_SOCKET_IFNAME, NCCL_IB_HCA).
ALLOWED_PREFIXES = (
    "LC_", "CUDA_", "NVIDIA_", "TRITON_", "OMP_", "MKL_", "OPENBLAS_", "NCCL_", "GLOO_",
)  # fmt: skip
#: Never passed on, whatever the allow-list says: the names secrets go by.
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|DSN", re.IGNORECASE)


class SandboxError(RuntimeError):
    """The sandbox cannot be set up here; the message says what to change."""


def child_env(source: Mapping[str, str], home: Path) -> dict[str, str]:
    """The environment of a child: the allowed variables of ``source``, and ``HOME``,
    ``TMPDIR``, the XDG directories and Triton's cache inside ``home``'s private tree."""
    env = {
        name: value
        for name, value in source.items()
        if (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not SECRET_NAME.search(name)
    }
    env.setdefault("PATH", os.defpath)
    private = home.parent
    env.update(
        HOME=str(home),
        TMPDIR=str(private / "tmp"),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        TRITON_CACHE_DIR=str(private / "triton"),
        PYTHONNOUSERSITE="1",
    )
    return env


def _own_name() -> str:
    """This process's user name, or one made up for a uid with no account (a container run
    under an arbitrary uid)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"kw-sandbox-{os.getuid()}"


@dataclass(frozen=True)
class Identity:
    """The user a child runs as: None for this process's own. A leased uid has no account, so
    its ``name`` is one made up for it and passed as ``USER`` and ``LOGNAME``: without them
    ``getpass.getuser()`` (torch's CuTe DSL cache, Inductor's cache directory) asks the
    password database and raises ``KeyError``."""

    name: str
    uid: int
    gid: int


@dataclass(frozen=True)
class Launch:
    """How a sandboxed child starts: ``unshare`` with these options (none: no namespaces),
    then ``jail.py`` on ``spec``, which runs ``argv`` as the sandbox user under its reaper."""

    unshare: tuple[str, ...]
    spec: dict[str, object]
    argv: tuple[str, ...]

    def command(self) -> list[str]:
        """The command line that does it."""
        jail_argv = [sys.executable, "-m", JAIL, json.dumps(self.spec), "--", *self.argv]
        return [*self.unshare, "--", *jail_argv] if self.unshare else jail_argv


@dataclass
class Sandbox:
    """One private directory, identity and network policy, shared by the children of one
    supervised run (a restart after a crash reuses the staged suites and Triton's cache).
    ``namespaces``: children get their own network namespace, and as root their own mount
    namespace too (where ``jail.py`` hides and exposes paths before dropping to the user);
    ``network``: with namespaces, the network namespace is left out (a multi-node world's
    node, whose ranks reach the other nodes); ``notes``: what a trusted holder ran without
    (:func:`held_sandbox`)."""

    root: Path
    identity: Identity | None
    namespaces: bool
    hidden: tuple[str, ...] = ()
    staged: dict[str, str] = field(default_factory=dict)
    exposed: set[str] = field(default_factory=set)
    network: bool = True
    notes: tuple[str, ...] = ()
    #: The runner's exchange directory (``harness/isolation/remote.py``): children run there,
    #: not here.
    exchange: Path | None = None

    def describe(self) -> str:
        """One line: how this sandbox's children are isolated, and what is missing."""
        if self.notes:
            return "; ".join(self.notes)
        who = f"as user {self.identity.name}" if self.identity else "as this process's user"
        net = "with no network" if self.network else "on the pod's network (multi-node)"
        return f"sandboxed: children run {who}, in namespaces of their own, {net}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    def env(
        self, extra: Mapping[str, str] | None = None, source: Mapping[str, str] | None = None
    ) -> dict[str, str]:
        """The child's environment (:func:`child_env` of ``source``, by default this
        process's) with the name of the user it runs as, plus ``extra`` set by the platform."""
        env = child_env(os.environ if source is None else source, self.home)
        name = self.identity.name if self.identity is not None else _own_name()
        env.update(USER=name, LOGNAME=name)
        return {**env, **(extra or {})}

    def command(self, argv: list[str], own_pids: bool = True) -> list[str]:
        """``argv`` wrapped to run in fresh namespaces and as the sandbox user, always under
        ``jail.py``'s reaper, so that nothing it starts outlives it (:meth:`launch`). With a
        runner (``exchange``), the proxy that runs ``argv`` there: the runner sandboxes it."""
        if self.exchange is not None:
            return proxy_command(self.exchange, argv)
        return self.launch(argv, own_pids).command()

    def launch(self, argv: list[str], own_pids: bool = True) -> Launch:
        """How ``argv`` starts here: the namespaces ``unshare`` makes, then ``jail.py``'s
        spec. One description for both ways a child starts: the command line
        (:meth:`Launch.command`) and a fork of a process that imported its libraries already
        (``preload.py``), which makes the same namespaces itself.

        Each child gets a PID namespace of its own (it sees and signals no process of the
        worker's, of another run's or of the other side of an A/B pair, though all run as
        one sandbox user), unless ``own_pids`` is False: a distributed case's ranks, which
        share GPU memory through handles that name each other's processes."""
        isolated = self.namespaces and self.network
        unshare = tuple(network_namespace_prefix(network=self.network)) if self.namespaces else ()
        if self.identity is None:
            spec: dict[str, object] = {"cwd": str(self.home)}
            if self.namespaces:
                spec.update(
                    confine=True,
                    network=isolated,
                    user=[os.getuid(), os.getgid()],
                    hide=list(self.hidden),
                    expose=sorted({*_python_dirs(script=False), *self.exposed}),
                    writable=[str(self.root)],
                    pids=own_pids,
                )
            return Launch(unshare, spec, tuple(argv))
        spec = {
            "uid": self.identity.uid,
            "gid": self.identity.gid,
            "cwd": str(self.home),
            "mounts": self.namespaces,
            "pids": self.namespaces and own_pids,
            "network": isolated,
            # The temporary directory and the scratch filesystems hold other runs' sandboxes
            # (their Triton caches) and checkouts, all the sandbox user's or readable by it:
            # covered, and what this child needs bound back.
            "hide": [*self.hidden, tempfile.gettempdir(), *_scratch_parent()],
            "expose": sorted({*_python_dirs(), str(self.root), *self.exposed}),
        }
        return Launch(unshare, spec, tuple(argv))

    def suite(self, ref: SuiteRef) -> SuiteRef:
        """``ref`` as the child can import it: absolute paths (the child's working directory
        is its private home), each directory copied into the private directory when the
        sandbox user cannot read it where it is. ``src`` stays relative to the root it was
        given for; without a root it was relative to this directory and becomes absolute."""
        root = self._readable(Path(ref.root)) if ref.root else None
        revision = revision_of(Path(ref.root)) if ref.root else None
        src = ref.src
        if src is not None and root is None:
            src = str(self._readable(Path(src).resolve()))
        if not ref.is_file:
            return SuiteRef(ref.target, str(root) if root else None, src, revision)
        path = Path(ref.target)
        if not path.is_absolute():
            path = Path(ref.root or Path.cwd()) / path
        path = path.resolve()
        if ref.root and root and path.is_relative_to(Path(ref.root).resolve()):
            target = root / path.relative_to(Path(ref.root).resolve())
            return SuiteRef(str(target), str(root), src, revision)
        target = self._readable(path.parent) / path.name
        return SuiteRef(str(target), str(root) if root else None, src, revision)

    def _readable(self, directory: Path) -> Path:
        source = directory.resolve()
        if self.exchange is not None and source.is_dir():
            return self._staged_for_runner(source)
        if not source.is_dir():
            return source  # a missing suite is the child's to report
        if self.identity is None:
            self.exposed.add(str(source))  # bound back into a confined child's view
            return source
        # With a mount namespace only the directory's own mode matters: the jail opens the
        # way to it. Without one, every parent must let the user through.
        if _reachable(source, self.identity, ancestors=not self.namespaces):
            self.exposed.add(str(source))
            return source
        if str(source) not in self.staged:
            target = self.root / "suites" / f"{len(self.staged)}-{source.name}"
            shutil.copytree(source, target, symlinks=True, ignore=_git_dir)
            _give(target, self.identity)
            self.staged[str(source)] = str(target)
        return Path(self.staged[str(source)])

    def _staged_for_runner(self, source: Path) -> Path:
        """``source`` copied under this sandbox's root on the requests volume, the only place
        the runner sees (at the same path), readable by any user: the runner's sandbox user
        is not this side's."""
        if str(source) not in self.staged:
            target = self.root / "suites" / f"{len(self.staged)}-{source.name}"
            shutil.copytree(source, target, symlinks=True, ignore=_git_dir)
            for directory, _dirs, files in os.walk(target):
                os.chmod(directory, 0o755)
                for name in files:
                    path = os.path.join(directory, name)
                    if not os.path.islink(path):
                        os.chmod(path, 0o755 if os.access(path, os.X_OK) else 0o644)
            self.staged[str(source)] = str(target)
        return Path(self.staged[str(source)])


#: What a run of untrusted code says where no namespace can be made.
_UNCONTAINED = (
    "untrusted kernel code is refused here: `unshare` cannot make namespaces for it (no "
    "CAP_SYS_ADMIN as root, no unprivileged user namespaces otherwise), so it would share "
    "this worker's uid, files and network; run pull-request checks through the deployment's "
    "runner (infra/compose.yaml, infra/k8s; docs/SECURITY.md) or on a host that allows "
    "user namespaces"
)
#: Set by the deployment's runner (:func:`contained`): this process holds nothing worth
#: taking, so its children may run untrusted code without namespaces. The note it records.
_CONTAINED: ContextVar[str | None] = ContextVar("kernelwatch_contained", default=None)


@contextmanager
def contained(why: str) -> Iterator[None]:
    """Inside the block, sandboxes may run code where no namespace can be made, because this
    process was checked to hold nothing worth taking (the deployment's runner: no secret, no
    credential file, no network) or the code is kernelwatch's own (the demo's generated
    repository); ``why`` is what each sandbox records."""
    token = _CONTAINED.set(f"no namespaces: {why}")
    try:
        yield
    finally:
        _CONTAINED.reset(token)


def refusal() -> str | None:
    """Why a commit's kernel code would be refused here (one line that says what to do), or
    None: with a runner, a deployment's runner's own permission (:func:`contained`) or
    namespaces it can be run. A command asks before it starts a flow, so that the refusal
    is its one line, not a task's failure and its traceback."""
    if exchange_dir() is not None or _CONTAINED.get() is not None or namespaces_available():
        return None
    return _UNCONTAINED


#: The sandbox a block holds for every child started inside it (:func:`held_sandbox`).
_HELD: ContextVar[Sandbox | None] = ContextVar("kernelwatch_held_sandbox", default=None)


@contextmanager
def sandbox() -> Iterator[Sandbox]:
    """A sandbox for the children of one run, removed with everything in it on exit; inside
    :func:`held_sandbox`, the one it holds. Raises :class:`SandboxError` when this host
    cannot build one (kernel code is untrusted unless the holder said otherwise)."""
    held = _HELD.get()
    if held is not None:
        yield held
        return
    with _new_sandbox(trusted=False) as box:
        yield box


@contextmanager
def held_sandbox(trusted: bool = False) -> Iterator[Sandbox]:
    """One sandbox for every child started inside the block, so they share Triton's cache
    and the staged suites (the self-check's stages compile the built-in suite once).

    ``trusted``: the code the children run is the built-in suite, not a commit under test.
    Where this host lacks what the sandbox needs (no ``useradd``, no ``unshare``, no user
    namespaces, a Python the sandbox user cannot read), trusted children run with what is
    left and :attr:`Sandbox.notes` says what is missing; untrusted code is refused."""
    with _new_sandbox(trusted) as box:
        token = _HELD.set(box)
        try:
            yield box
        finally:
            _HELD.reset(token)


@contextmanager
def _new_sandbox(trusted: bool) -> Iterator[Sandbox]:
    notes: list[str] = []
    # With a runner, kernel code runs there, in the runner's own sandbox: this side starts
    # only proxies, and its root (on the requests volume) is where the suites are staged.
    exchange = exchange_dir()
    namespaces = namespaces_available() if exchange is None else True
    # Refused before anything else: without namespaces nothing else would contain it.
    refused = refusal()
    if refused is not None and not trusted:
        raise SandboxError(refused)
    # The scratch space is leased first and released last: after the uid's processes ended,
    # when nothing of the job can hold a deleted file open in it.
    space = scratch_space() if exchange is None else contextlib.nullcontext()
    with space as scratch:
        yield from _leased(trusted, exchange, namespaces, notes, scratch)


def _leased(
    trusted: bool,
    exchange: Path | None,
    namespaces: bool,
    notes: list[str],
    scratch: Path | None,
) -> Iterator[Sandbox]:
    leases = contextlib.ExitStack()
    try:
        identity = leases.enter_context(leased_identity()) if exchange is None else None
        if identity is not None:
            _check_environment_readable(identity, namespaces)
    except SandboxError as exc:
        leases.close()
        if not trusted:
            raise
        identity = None
        notes.append(f"unsandboxed: {exc}; the built-in suite is trusted, so its children "
                     f"run as this process's user (uid {os.geteuid()})")  # fmt: skip
    if not namespaces:
        notes.append(
            _CONTAINED.get()
            or "no network namespace: `unshare` is missing or refused here, so children keep "
            "this host's network"
        )
    base = trees_dir(exchange) if exchange is not None else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="kernelwatch-sandbox-", dir=base or scratch))
    with leases:
        yield from _filled(root, identity, namespaces, notes, exchange)


def _filled(
    root: Path,
    identity: Identity | None,
    namespaces: bool,
    notes: list[str],
    exchange: Path | None,
) -> Iterator[Sandbox]:
    """The sandbox in ``root`` (made), removed with everything in it afterwards."""
    try:
        for sub in ("home", "tmp", "triton", "suites"):
            (root / sub).mkdir()
        if identity is not None:
            _give(root, identity)
        network = not spans_nodes(os.environ)
        box = Sandbox(root, identity, namespaces, _hidden(), network=network, notes=tuple(notes))
        if exchange is not None:
            os.chmod(root, 0o755)  # the runner's sandbox user reads the staged suites
            box.exchange = exchange
            box.notes = (f"children run in the runner of {exchange}, in its sandbox",)
        yield box
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def leased_identity() -> Iterator[Identity | None]:
    """The user a sandbox's children run as, for as long as the block lasts: none of their
    own unless this process is root; then the account ``$KERNELWATCH_SANDBOX_USER`` names
    (every sandbox shares it), or else a uid of :data:`UID_POOL` no other sandbox on this
    host holds meanwhile, which needs no account. On the way out, what that uid left in the
    shared temporary directories is removed, so the next holder finds nothing of it."""
    if os.geteuid() != 0:
        yield None
        return
    named = os.environ.get(USER_ENV)
    if named:
        entry = system_user(named)
        if entry.pw_uid == 0:
            raise SandboxError(
                f"{USER_ENV}={named} is root: kernel code must run as an unprivileged user"
            )
        yield Identity(named, entry.pw_uid, entry.pw_gid)
        return
    locks = _lock_dir()
    for uid in _rotation(locks):
        if _has_account(uid):
            continue  # its files are someone's
        fd = os.open(locks / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        (locks / NEXT_UID).write_text(str(uid + 1))
        try:
            # A holder killed outright never reached its ``finally``: what its children
            # left is ended before this lease's children start.
            if jail.live_processes(uid):
                end_processes(uid)
            yield Identity(f"kw-sandbox-{uid}", uid, uid)
        finally:
            try:
                end_processes(uid)
            finally:
                _sweep(uid)
                os.close(fd)
        return
    raise SandboxError(
        f"all {len(UID_POOL)} sandbox uids ({UID_POOL.start}-{UID_POOL.stop - 1}) are held by "
        f"other sandboxes on this host: wait for runs to end, or name one account in {USER_ENV}"
    )


@contextmanager
def scratch_space() -> Iterator[Path | None]:
    """The scratch filesystem a sandbox's root goes in, for as long as the block lasts: one of
    ``$KERNELWATCH_SCRATCH``'s, which no other sandbox holds meanwhile, emptied of what an
    earlier holder left on the way in and out; None where that variable is unset (the
    temporary directory, shared). Waits up to :data:`SCRATCH_WAIT_S` for one to be free."""
    value = os.environ.get(SCRATCH_ENV)
    if not value:
        yield None
        return
    spaces = scratch_spaces(Path(value))
    deadline = time.monotonic() + SCRATCH_WAIT_S
    while True:
        for space in spaces:
            fd = os.open(space / SCRATCH_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                _empty(space)  # a holder killed outright never reached its ``finally``
                os.chmod(space, 0o711)  # the sandbox user reaches its root, lists nothing
                yield space
            finally:
                _empty(space)
                os.close(fd)
            return
        if time.monotonic() > deadline:
            raise SandboxError(
                f"all {len(spaces)} scratch filesystems of {SCRATCH_ENV}={value} are held by "
                f"other sandboxes after {SCRATCH_WAIT_S:.0f} s: mount more, one per job the "
                "runner runs at once"
            )
        time.sleep(0.2)


def scratch_spaces(parent: Path) -> list[Path]:
    """The scratch filesystems under ``parent`` (:data:`SCRATCH_ENV`), each checked to be a
    filesystem of its own: a plain directory would cap nothing. Raises
    :class:`SandboxError` saying what to mount otherwise."""
    try:
        spaces = sorted(p for p in parent.iterdir() if p.is_dir() and not p.is_symlink())
        device = parent.stat().st_dev
    except OSError as exc:
        raise SandboxError(f"{SCRATCH_ENV}={parent} cannot be read: {exc}") from exc
    if not spaces:
        raise SandboxError(
            f"{SCRATCH_ENV}={parent} has no scratch filesystems: mount one size-capped tmpfs "
            "per job the runner runs at once in a directory of its own there"
        )
    for space in spaces:
        if space.stat().st_dev == device:
            raise SandboxError(
                f"{space} is a directory of {parent}'s filesystem, not one of its own, so it "
                "caps nothing: mount a size-capped tmpfs there (compose `tmpfs`, a Kubernetes "
                "emptyDir of medium Memory with a sizeLimit)"
            )
    return spaces


def _empty(space: Path) -> None:
    """Remove everything in a scratch filesystem but its lease's lock file."""
    for entry in os.scandir(space):
        if entry.name == SCRATCH_LOCK:
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


#: The file in the lease directory naming the uid the next lease tries first.
NEXT_UID = "next"
#: How long ending a uid's processes may take before the lease's end says it failed.
END_WITHIN_S = 30.0


def _rotation(locks: Path) -> list[int]:
    """:data:`UID_POOL` in the order the next lease tries it: from the uid after the last
    one leased, round the pool. Not first-free: a process that outlived its run (had it
    escaped every kill) would otherwise meet the very next run, under the same uid."""
    try:
        start = int((locks / NEXT_UID).read_text())
    except (OSError, ValueError):
        start = UID_POOL.start
    if start not in UID_POOL:
        start = UID_POOL.start
    return [*range(start, UID_POOL.stop), *range(UID_POOL.start, start)]


def end_processes(uid: int) -> None:
    """End every process of the leased ``uid`` (a sandbox's children, whatever they forked
    and wherever they went): ``jail --end`` run as that uid. Every child of the sandbox has
    ended by then, so nothing of the uid has a right to live. Raises :class:`SandboxError`
    when some still live after :data:`END_WITHIN_S`."""
    # Started as root, it drops to the uid itself: the uid may not read this Python. Where
    # kernelwatch comes from PYTHONPATH (a wheel unpacked on a GPU host), so does the jail.
    env = {name: os.environ[name] for name in ("PATH", "PYTHONPATH") if name in os.environ}
    ended = subprocess.run(
        [sys.executable, "-m", JAIL, "--end", str(uid), str(END_WITHIN_S)],
        cwd="/", env=env, capture_output=True, text=True, check=False,
        timeout=END_WITHIN_S + 30,
    )  # fmt: skip
    left = jail.live_processes(uid) if ended.returncode != 0 else []
    if left:
        raise SandboxError(
            f"processes of sandbox uid {uid} outlived its run and could not be ended "
            f"({ended.stderr.strip() or f'exit {ended.returncode}'}; still alive: {left}): "
            "kill them before another run starts"
        )


def _lock_dir() -> Path:
    """Root's private directory of uid leases (a lock file per uid, held with ``flock``)."""
    locks = Path(tempfile.gettempdir()) / "kernelwatch-sandbox-uids"
    with contextlib.suppress(FileExistsError):
        locks.mkdir(mode=0o700)
    info = os.lstat(locks)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise SandboxError(f"{locks} is not root's directory: remove it and run again")
    os.chmod(locks, 0o700)
    return locks


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _sweep(uid: int) -> None:
    """Remove what ``uid`` left at the top of the directories every user may write."""
    for shared in {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"}:
        try:
            entries = list(os.scandir(shared))
        except OSError:
            continue
        for entry in entries:
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)


def system_user(name: str) -> pwd.struct_passwd:
    """The account ``name``: SandboxError when there is none."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise SandboxError(
            f"no user {name!r} on this machine; create it or unset {USER_ENV}"
        ) from None


@functools.cache
def namespaces_available() -> bool:
    """Whether a child can be started in namespaces of its own here (see
    :func:`network_namespace_prefix`)."""
    try:
        probe = subprocess.run(
            # --pid too: the jail makes each child a PID namespace of its own.
            [*network_namespace_prefix(), "--pid", "--", "true"],
            capture_output=True,
            check=False,
        )
    except OSError:
        return False
    return probe.returncode == 0


def network_namespace_prefix(network: bool = True) -> list[str]:
    """The ``unshare`` command that gives a process an empty network namespace: as root with
    a mount namespace of its own too (for ``jail.py``), otherwise inside a user namespace
    whose root is this user, with a mount namespace for ``jail.py``'s confinement (which
    makes the child's PID namespace itself). Without ``network``, the same without the
    network namespace."""
    net = ["--net"] if network else []
    if os.geteuid() == 0:
        return ["unshare", "--mount", *net]
    return ["unshare", "--user", "--map-root-user", "--mount", *net]


def _python_dirs(script: bool = True) -> list[str]:
    """The directories the child's Python needs: its installation, the virtual environment,
    everything on ``sys.path`` (site-packages) and ``PYTHONPATH``, and the folder
    kernelwatch's packages are imported from, which an editable install reaches through a
    finder, not ``sys.path``. Without ``script``, not the first entry of ``sys.path`` (this
    process's script's directory or working directory, which a child started with ``-m`` in
    its own home does not import from, and which may be ``/tmp`` itself)."""
    dirs = set(_needed_dirs())
    paths = sys.path if script else sys.path[1:]
    extra = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    dirs.update(p for p in [*paths, *extra] if p and os.path.isdir(p))
    return sorted(dirs)


def _needed_dirs() -> tuple[str, ...]:
    """What no child can start without: the Python installation, the virtual environment and
    the folder kernelwatch's packages are imported from (an editable checkout's root). The
    other entries of ``sys.path`` a child may not read, which Python skips."""
    kernelwatch = str(Path(__file__).resolve().parents[2])  # this file is harness/isolation/
    return (sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parent), kernelwatch)


def _scratch_parent() -> list[str]:
    """The directory of scratch filesystems, where set: other sandboxes' roots are there."""
    value = os.environ.get(SCRATCH_ENV)
    return [str(Path(value).resolve())] if value else []


def _hidden() -> tuple[str, ...]:
    """What a root worker's children must not see even where its permissions would let them:
    the configuration file (it may hold the database URL), as ``KERNELWATCH_CONFIG`` names it
    or in the working directory (config/settings.py reads it; harness/ may not import it)."""
    files = [os.environ.get("KERNELWATCH_CONFIG"), str(Path.cwd() / "kernelwatch.toml")]
    return tuple(str(Path(f).resolve()) for f in files if f and Path(f).is_file())


def _check_environment_readable(identity: Identity, namespaces: bool) -> None:
    """Refuse a sandbox whose child could not import Python or kernelwatch: a directory the
    leased user cannot read. With a mount namespace the jail covers private ancestors
    (``jail.expose``) but cannot open a private directory itself, so the directories every
    child needs (:func:`_needed_dirs`) must be readable (an editable checkout cloned into
    ``mktemp -d``: each child died on ``No module named 'kernelwatch.harness'``); without
    one, every path of :func:`_python_dirs` must be searchable from the root."""
    for path in _needed_dirs() if namespaces else _python_dirs():
        if _reachable(Path(path), identity, ancestors=not namespaces):
            continue
        where = "it is private" if namespaces else "a parent directory is private"
        remedy = (
            f"make it readable by other users (chmod o+rx {path})"
            if namespaces
            else "no mount namespace can be made here to let it: install kernelwatch and its "
            "Python where other users can read them"
        )
        raise SandboxError(
            f"kernel code runs as user {identity.name}, who cannot read {path} ({where}): "
            f"{remedy}, or name another user in {USER_ENV}"
        )


def _reachable(path: Path, identity: Identity, ancestors: bool = True) -> bool:
    """Whether ``identity`` may read ``path`` and (with ``ancestors``) search every directory
    down to it, by the permission bits (ACLs are not consulted)."""
    groups = {identity.gid} | {g.gr_gid for g in grp.getgrall() if identity.name in g.gr_mem}
    try:
        chain = [*reversed(path.parents), path] if ancestors else [path]
        for index, part in enumerate(chain):
            info = part.stat()
            last = index == len(chain) - 1
            need = (4 if last else 0) | (1 if stat.S_ISDIR(info.st_mode) or not last else 0)
            if info.st_uid == identity.uid:
                bits = (info.st_mode >> 6) & 7
            elif info.st_gid in groups:
                bits = (info.st_mode >> 3) & 7
            else:
                bits = info.st_mode & 7
            if bits & need != need:
                return False
    except OSError:
        return False
    return True


def _give(root: Path, identity: Identity) -> None:
    """Make ``root`` and everything under it the sandbox user's."""
    for directory, dirs, files in os.walk(root):
        for name in [directory, *(os.path.join(directory, n) for n in dirs + files)]:
            os.lchown(name, identity.uid, identity.gid)
    os.chmod(root, 0o700)


def _git_dir(directory: str, names: list[str]) -> list[str]:
    return [".git"] if ".git" in names else []
