"""Where a child that imports a commit's kernels runs: what it can see, who it is, what it
can reach. Kernel code is untrusted (a pull request's may be hostile), so every child gets:

- an environment built from an allow-list (``PATH``, locale, CUDA/Triton/BLAS settings), never
  the worker's: no database URL, Prefect key, Grafana token or webhook reaches it;
- a private directory of its own for ``HOME``, ``TMPDIR``, the XDG directories and Triton's
  cache, removed afterwards, so no cache it writes is read by a later run;
- as root, an unprivileged user of its own (``kernelwatch-sandbox``, created when missing),
  so it can neither read the worker's files nor write its caches, spool or results;
- no network, through a network namespace, where the platform lets one be made (root, or
  unprivileged user namespaces); elsewhere it keeps the host's network (docs/SECURITY.md).
  On a node of a multi-node world (``NNODES`` above 1) the ranks must reach the other nodes,
  so children keep the pod's network, which the multi-node pool's NetworkPolicy limits
  (infra/k8s/multi-node/); everything else holds.

A suite directory the sandbox user cannot read (a checkout under a private directory) is
copied into the private directory first. The Python environment itself must be readable by
that user; :class:`SandboxError` says so otherwise.
"""

from __future__ import annotations

import functools
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
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from kernelwatch.harness.distributed.nodes import ENV as NODES_ENV
from kernelwatch.harness.distributed.nodes import spans_nodes
from kernelwatch.harness.suite import SuiteRef, revision_of

USER_ENV = "KERNELWATCH_SANDBOX_USER"
DEFAULT_USER = "kernelwatch-sandbox"
#: Where a GPU host without nvcc finds prebuilt cubins (harness/cuda_kernel.py reads it).
#: Declared here, not there, so that the parents that start children never import torch.
CUBIN_DIR_ENV = "KERNELWATCH_CUBIN_DIR"
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
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|_URL$|DSN", re.IGNORECASE)


class SandboxError(RuntimeError):
    """The sandbox cannot be set up here; the message says what to change."""


def child_env(source: Mapping[str, str], home: Path) -> dict[str, str]:
    """The environment of a child: the allowed variables of ``source``, and ``HOME``,
    ``TMPDIR``, the XDG directories and Triton's cache inside ``home``'s private tree."""
    env = {
        name: value
        for name, value in source.items()
        if (name in ALLOWED or name.startswith(ALLOWED_PREFIXES)) and not _SECRET.search(name)
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


@dataclass(frozen=True)
class Identity:
    """The user a child runs as: None for this process's own."""

    name: str
    uid: int
    gid: int


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

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment (:func:`child_env`), plus ``extra`` set by the platform."""
        return {**child_env(os.environ, self.home), **(extra or {})}

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` wrapped to run in fresh namespaces and as the sandbox user, always under
        ``jail.py``'s reaper, so that nothing it starts outlives it."""
        isolated = self.namespaces and self.network
        if self.identity is None:
            spec = json.dumps({"cwd": str(self.home)})
            jail = [sys.executable, "-m", "kernelwatch.harness.jail", spec, "--", *argv]
            return [*network_namespace_prefix(), "--", *jail] if isolated else jail
        spec = {
            "uid": self.identity.uid,
            "gid": self.identity.gid,
            "cwd": str(self.home),
            "mounts": self.namespaces,
            "network": isolated,
            "hide": list(self.hidden),
            "expose": sorted({*_python_dirs(), str(self.root), *self.exposed}),
        }
        jail = [sys.executable, "-m", "kernelwatch.harness.jail", json.dumps(spec), "--", *argv]
        if not self.namespaces:
            return jail
        return [*network_namespace_prefix(network=self.network), "--", *jail]

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
        if self.identity is None or not source.is_dir():
            return source  # a missing suite is the child's to report
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
    try:
        identity = sandbox_identity()
        namespaces = namespaces_available()
        if identity is not None and not namespaces:
            _check_environment_readable(identity)
    except SandboxError as exc:
        if not trusted:
            raise
        identity, namespaces = None, namespaces_available()
        notes.append(f"unsandboxed: {exc}; the built-in suite is trusted, so its children "
                     f"run as this process's user (uid {os.geteuid()})")  # fmt: skip
    if not namespaces:
        notes.append(
            "no network namespace: `unshare` is missing or refused here, so children keep "
            "this host's network"
        )
    root = Path(tempfile.mkdtemp(prefix="kernelwatch-sandbox-"))
    try:
        for sub in ("home", "tmp", "triton", "suites"):
            (root / sub).mkdir()
        if identity is not None:
            _give(root, identity)
        network = not spans_nodes(os.environ)
        yield Sandbox(root, identity, namespaces, _hidden(), network=network, notes=tuple(notes))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def sandbox_identity() -> Identity | None:
    """The user children run as: none of their own unless this process is root, then
    ``$KERNELWATCH_SANDBOX_USER`` or ``kernelwatch-sandbox`` (created if missing)."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get(USER_ENV) or DEFAULT_USER
    entry = system_user(name, create=name == DEFAULT_USER)
    if entry.pw_uid == 0:
        raise SandboxError(
            f"{USER_ENV}={name} is root: kernel code must run as an unprivileged user"
        )
    return Identity(name, entry.pw_uid, entry.pw_gid)


def system_user(name: str, create: bool) -> pwd.struct_passwd:
    """The account ``name``; created as a system user without a home or a login shell when
    missing and ``create`` (needs root)."""
    try:
        return pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise SandboxError(f"no user {name!r} on this machine; create it or unset "
                               f"{USER_ENV}") from None  # fmt: skip
    try:
        proc = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:  # gVisor-like images may have no useradd at all
        raise SandboxError(
            f"cannot create user {name!r}: useradd cannot run here ({exc.strerror}); create "
            f"the user in the image or name an existing one in {USER_ENV}"
        ) from None
    # Another process may have created it meanwhile (useradd exits 9 then).
    if proc.returncode not in (0, 9):
        raise SandboxError(f"cannot create user {name!r}: {proc.stderr.strip()}")
    return pwd.getpwnam(name)


@functools.cache
def namespaces_available() -> bool:
    """Whether a child can be started in namespaces of its own here (see
    :func:`network_namespace_prefix`)."""
    try:
        probe = subprocess.run(
            [*network_namespace_prefix(), "--", "true"], capture_output=True, check=False
        )
    except OSError:
        return False
    return probe.returncode == 0


def network_namespace_prefix(network: bool = True) -> list[str]:
    """The ``unshare`` command that gives a process an empty network namespace: as root with
    a mount namespace of its own too (for ``jail.py``), otherwise inside a user namespace
    that maps this user to itself. Without ``network``, a root's mount namespace alone."""
    if os.geteuid() == 0:
        return ["unshare", "--mount", *(["--net"] if network else [])]
    return ["unshare", "--user", "--map-current-user", "--net"]


def _python_dirs() -> list[str]:
    """The directories the child's Python needs: its installation, the virtual environment,
    everything on ``sys.path`` (site-packages) and the folder kernelwatch's packages are
    imported from, which an editable install reaches through a finder, not ``sys.path``."""
    kernelwatch = str(Path(__file__).resolve().parent.parent)
    dirs = {sys.base_prefix, sys.prefix, str(Path(sys.executable).resolve().parent), kernelwatch}
    dirs.update(p for p in sys.path if p and os.path.isdir(p))
    return sorted(dirs)


def _hidden() -> tuple[str, ...]:
    """What a root worker's children must not see even where its permissions would let them:
    the configuration file (it may hold the database URL), as ``KERNELWATCH_CONFIG`` names it
    or in the working directory (config/settings.py reads it; harness/ may not import it)."""
    files = [os.environ.get("KERNELWATCH_CONFIG"), str(Path.cwd() / "kernelwatch.toml")]
    return tuple(str(Path(f).resolve()) for f in files if f and Path(f).is_file())


def _check_environment_readable(identity: Identity) -> None:
    for path in _python_dirs():
        if not _reachable(Path(path), identity):
            raise SandboxError(
                f"kernel code runs as user {identity.name}, who cannot read {path} (a parent "
                "directory is private) and no mount namespace can be made here to let it: "
                "install kernelwatch and its Python where other users can read them, or "
                f"name another user in {USER_ENV}"
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
