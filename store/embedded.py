"""The embedded PostgreSQL server: a real server kernelwatch starts itself in a per-user
directory when no database URL is configured, and reuses across runs.

Layout of the directory: ``data/`` (PGDATA), ``run/`` (the Unix socket; no TCP port is
opened, and only the directory's owner reaches the socket), ``passfile`` (the superuser's
password, in libpq's format: local connections authenticate with SCRAM, so a process that
reaches the socket without it is refused), ``server.log`` and
``lock`` (serialises concurrent starts). PostgreSQL refuses to run as root, so as root the
server runs as an unprivileged user (``postgres`` where it exists, else a ``kernelwatch``
system user that is created) who owns the directory.

The directory may be named by anyone who sets ``KERNELWATCH_PG_DIR``, so kernelwatch deletes
and re-owns only what it created: a directory it made or found empty carries a marker file
(an earlier kernelwatch's directory, with nothing but its layout, is adopted); anything else
is refused, as are symbolic links anywhere in the layout and a directory owned by another
user. Before ``initdb`` replaces a half-made cluster, a server still answering on the
socket is ruled out.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import importlib.util
import os
import pwd
import re
import secrets
import shutil
import socket
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import psycopg.sql

PG_BIN_ENV = "KERNELWATCH_PG_BIN"
PG_USER_ENV = "KERNELWATCH_PG_USER"
DATABASE = "kernelwatch"
SUPERUSER = "postgres"
# The socket file name carries the port; with no TCP listener any fixed port is free.
PORT = 5432
# Unix socket paths are limited to 107 bytes (sun_path).
_SOCKET_PATH_MAX = 107
_START_TIMEOUT_S = 60
#: Written into a directory kernelwatch made (or found empty): the only kind it will change.
MARKER = ".kernelwatch-embedded"
#: Every name kernelwatch puts in its directory.
_LAYOUT = ("data", "run", "server.log", "lock", "command.log", "passfile", MARKER)
#: How every connection authenticates (a cluster an earlier kernelwatch made with ``trust``
#: is moved to it on its next start).
_AUTH = "scram-sha-256"
# Local, single-tenant server: fewer checkpoints during bulk ingest; everything else default.
_SETTINGS = {
    "listen_addresses": "''",
    "port": str(PORT),
    "max_wal_size": "'2GB'",
    "log_min_messages": "warning",
}


class EmbeddedError(RuntimeError):
    """The embedded server could not be set up or started; the message says what to do."""


@dataclass(frozen=True)
class ServerState:
    """What ``ensure_running`` found or did."""

    started: bool
    pid: int | None
    version: str


@dataclass(frozen=True)
class EmbeddedServer:
    """A PostgreSQL cluster in ``root``. Methods are idempotent and safe to call from several
    processes at once."""

    root: Path

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def socket_dir(self) -> Path:
        return self.root / "run"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    @property
    def socket_file(self) -> Path:
        return self.socket_dir / f".s.PGSQL.{PORT}"

    @property
    def password_file(self) -> Path:
        return self.root / "passfile"

    def url(self, database: str = DATABASE) -> str:
        """The libpq URL of ``database`` on this server: its Unix socket, and the password
        file the superuser's password is read from (no password in the URL itself)."""
        return (
            f"postgresql://{SUPERUSER}@/{database}?host={self.socket_dir}&port={PORT}"
            f"&passfile={self.password_file}"
        )

    def ensure_running(self) -> ServerState:
        """Create the cluster if missing, start it if stopped, and create the ``kernelwatch``
        database. Returns whether this call started the server."""
        if len(str(self.socket_file)) > _SOCKET_PATH_MAX:
            raise EmbeddedError(
                f"the socket path {self.socket_file} is longer than {_SOCKET_PATH_MAX} bytes; "
                f"set KERNELWATCH_PG_DIR to a shorter directory"
            )
        bin_dir = find_bin_dir()
        user = _server_user()
        self._prepare_root(user)
        with self._lock():
            if not (self.data_dir / "PG_VERSION").exists():
                self._refuse_live_server()
                self._initdb(bin_dir, user)
            started = False
            if not self.is_running():
                self._start(bin_dir, user)
                started = True
            self._require_password(user)
            self._create_database()
        return ServerState(started=started, pid=self.pid(), version=_version(bin_dir))

    def recreate_database(self, name: str) -> str:
        """Drop ``name`` if it exists, create it empty and return its URL (the server must be
        running). For throw-away data such as the demo's, kept apart from ``kernelwatch``."""
        if name == DATABASE or not re.fullmatch(r"[a-z_][a-z0-9_]*", name):
            raise EmbeddedError(f"refusing to recreate database {name!r}")
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def is_running(self) -> bool:
        """Whether a postmaster for this data directory is up and accepting connections."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass  # alive, owned by the server user
        return self.socket_file.exists()

    def pid(self) -> int | None:
        """The postmaster's pid from ``postmaster.pid``, or None when there is none."""
        try:
            first = (self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0]
        except (FileNotFoundError, PermissionError):
            return None
        return int(first) if first.strip().isdigit() else None

    def stop(self, mode: str = "fast") -> bool:
        """Stop the server and return whether it was running. ``fast`` rolls back open
        transactions and checkpoints; ``immediate`` skips the checkpoint (recovery runs at
        the next start): for a data directory about to be deleted."""
        if not self.is_running():
            return False
        self._run(
            [str(find_bin_dir() / "pg_ctl"), "stop", "-D", str(self.data_dir), "-m", mode,
             "-w", "-t", str(_START_TIMEOUT_S)],
            _server_user(),
        )  # fmt: skip
        return True

    def _prepare_root(self, user: str | None) -> None:
        entry = pwd.getpwnam(user) if user is not None else None
        self._claim(entry.pw_uid if entry else os.geteuid())
        if entry is None:
            _own(self.root, None)
            return
        self.socket_dir.mkdir(exist_ok=True)
        for path in (self.root, self.socket_dir):
            _own(path, entry)
        probe = subprocess.run(["test", "-w", str(self.root)], user=user, check=False)
        if probe.returncode != 0:
            raise EmbeddedError(
                f"PostgreSQL runs as user {user}, who cannot reach {self.root} (a parent "
                f"directory is private); set KERNELWATCH_PG_DIR to a directory every parent "
                f"of which {user} may search and only root may write, such as "
                f"/var/lib/kernelwatch/pg"
            )

    def _claim(self, server_uid: int) -> None:
        """Make ``root`` kernelwatch's, or refuse: it is created, or adopted when empty (or
        holding an earlier kernelwatch's layout only), and must be a real directory owned by
        this user or the server's, with no symbolic link among the names kernelwatch uses."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            self.root.mkdir(mode=0o700)
        info = os.lstat(self.root)
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise EmbeddedError(
                f"{self.root} is a symbolic link or not a directory; the embedded server "
                f"follows no links: set KERNELWATCH_PG_DIR to a real directory"
            )
        if info.st_uid not in {os.geteuid(), server_uid}:
            raise EmbeddedError(
                f"{self.root} belongs to user {_user_name(info.st_uid)}, not to this user or "
                f"the server's; set KERNELWATCH_PG_DIR to a directory of your own"
            )
        for name in _LAYOUT:
            if (self.root / name).is_symlink():
                raise EmbeddedError(
                    f"{self.root / name} is a symbolic link; the embedded server follows no "
                    f"links: remove it"
                )
        if (self.root / MARKER).is_file():
            return
        names = set(os.listdir(self.root))
        earlier = names <= set(_LAYOUT) and (self.data_dir / "PG_VERSION").is_file()
        if names and not earlier:
            raise EmbeddedError(
                f"{self.root} holds files kernelwatch did not create (it has no {MARKER}); "
                f"set KERNELWATCH_PG_DIR to a new or empty directory"
            )
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.root / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))

    @contextmanager
    def _lock(self) -> Iterator[None]:
        with os.fdopen(_open_private(self.root / "lock", os.O_APPEND), "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _refuse_live_server(self) -> None:
        """A server still answering on the socket (its ``data/`` moved or half-deleted
        under it) must be stopped by a person, not overwritten by a new cluster."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.settimeout(2)
            try:
                probe.connect(str(self.socket_file))
            except OSError:
                return
        raise EmbeddedError(
            f"a server answers on {self.socket_file} but {self.data_dir} holds no cluster; "
            f"stop that server before kernelwatch makes a new one there"
        )

    def _initdb(self, bin_dir: Path, user: str | None) -> None:
        # A half-made data directory from an interrupted initdb would make initdb refuse.
        # The directory is kernelwatch's (_claim) and no server uses it.
        if self.data_dir.exists():
            shutil.rmtree(self.data_dir)
        password = self._new_password(user)
        initial = self.root / "initdb.pw"
        with os.fdopen(_open_private(initial, os.O_TRUNC), "w") as handle:
            handle.write(password + "\n")
        _give_to(initial, user)
        try:
            self._run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    SUPERUSER,
                    f"--auth={_AUTH}",
                    f"--pwfile={initial}",
                    "--encoding=UTF8",
                    "--locale=C",
                ],
                user,
            )
        finally:
            initial.unlink(missing_ok=True)
        settings = "".join(f"{k} = {v}\n" for k, v in _SETTINGS.items())
        settings += f"unix_socket_directories = '{self.socket_dir}'\n"
        with open(self.data_dir / "postgresql.auto.conf", "a") as conf:
            conf.write(settings)

    def _start(self, bin_dir: Path, user: str | None) -> None:
        self.socket_dir.mkdir(mode=0o700, exist_ok=True)
        # pg_ctl appends to the log: what this start wrote begins at the current end.
        written = self.log_file.lstat().st_size if self.log_file.exists() else 0
        try:
            self._run(
                [
                    str(bin_dir / "pg_ctl"),
                    "start",
                    "-D",
                    str(self.data_dir),
                    "-w",
                    "-t",
                    str(_START_TIMEOUT_S),
                    "-l",
                    str(self.log_file),
                ],
                user,
            )
        except EmbeddedError as exc:
            raise EmbeddedError(
                f"{exc}; the server log {self.log_file} ends: {_last_line(self.log_file, written)}"
            ) from exc

    def _new_password(self, user: str | None) -> str:
        """A fresh random password for the superuser, written to :attr:`password_file`
        (0600, the server user's) in libpq's format, for every database on this socket."""
        password = secrets.token_urlsafe(32)
        with os.fdopen(_open_private(self.password_file, os.O_TRUNC), "w") as handle:
            handle.write(f"*:*:*:{SUPERUSER}:{password}\n")
        _give_to(self.password_file, user)
        return password

    def _require_password(self, user: str | None) -> None:
        """Move a cluster an earlier kernelwatch made with trust authentication (anyone who
        reached the socket was the superuser) to passwords: a password set for the superuser,
        ``trust`` replaced in pg_hba.conf, the configuration reloaded."""
        hba = self.data_dir / "pg_hba.conf"
        lines = hba.read_text().splitlines(keepends=True)
        trusting = [i for i, line in enumerate(lines) if re.search(r"^[^#]*\btrust\b", line)]
        if not trusting and self.password_file.is_file():
            return
        password = self._new_password(user)
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                psycopg.sql.Identifier(SUPERUSER), psycopg.sql.Literal(password)))  # fmt: skip
            for index in trusting:
                lines[index] = re.sub(r"\btrust\b", _AUTH, lines[index])
            hba.write_text("".join(lines))
            conn.execute("SELECT pg_reload_conf()")

    def _create_database(self) -> None:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,))
            if exists.fetchone() is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def _run(self, argv: list[str], user: str | None) -> None:
        # pg_ctl start leaves the postmaster holding inherited pipes, so its output goes to
        # a file, never to a pipe this process would wait on.
        out = self.root / "command.log"
        with os.fdopen(_open_private(out, os.O_TRUNC), "w") as sink:
            result = subprocess.run(
                argv,
                stdout=sink,
                stderr=subprocess.STDOUT,
                cwd=self.root,
                user=user,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        if result.returncode != 0:
            raise EmbeddedError(f"{Path(argv[0]).name} failed in {self.root}: {_last_line(out)}")


def _give_to(path: Path, user: str | None) -> None:
    """``path`` the server user's (it reads the initial password; it owns its directory)."""
    if user is not None:
        entry = pwd.getpwnam(user)
        os.lchown(path, entry.pw_uid, entry.pw_gid)


def _open_private(path: Path, mode: int) -> int:
    """A descriptor on ``path`` for writing, created 0600; never through a symbolic link."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | mode, 0o600)


def _own(path: Path, entry: pwd.struct_passwd | None) -> None:
    """``path`` (a directory, never followed through a link) private to ``entry``, or to
    this user when None."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if entry is not None:
            os.fchown(fd, entry.pw_uid, entry.pw_gid)
        os.fchmod(fd, 0o700)
    finally:
        os.close(fd)


def _last_line(path: Path, offset: int = 0) -> str:
    """The last non-empty line written to a log from ``offset`` on, for an error message."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"(no log: {exc.strerror})"
    with os.fdopen(fd, "rb") as handle:
        handle.seek(offset)
        lines = handle.read().decode(errors="replace").strip().splitlines()
    return lines[-1].strip()[:500] if lines else "(nothing written)"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def find_bin_dir() -> Path:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres``: ``KERNELWATCH_PG_BIN``,
    else the system's PostgreSQL (``pg_ctl`` on PATH, or Debian's newest
    ``/usr/lib/postgresql/N/bin``), else the one bundled with the ``pgserver`` package."""
    candidates: list[Path] = []
    if os.environ.get(PG_BIN_ENV):
        candidates.append(Path(os.environ[PG_BIN_ENV]))
    on_path = shutil.which("pg_ctl")
    if on_path:
        # Debian links /usr/local/bin/pg_ctl into /usr/lib/postgresql/N/bin.
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True)
    candidates.extend(Path(p) for p in debian)
    spec = importlib.util.find_spec("pgserver")
    if spec is not None and spec.submodule_search_locations:
        candidates.append(Path(spec.submodule_search_locations[0]) / "pginstall" / "bin")
    for candidate in candidates:
        if all((candidate / exe).is_file() for exe in ("initdb", "pg_ctl", "postgres")):
            return candidate
    raise EmbeddedError(
        "no PostgreSQL server binaries found: install PostgreSQL (e.g. apt-get install "
        f"postgresql) or the pgserver package, set {PG_BIN_ENV}, or configure a database URL"
    )


def _major(path: str) -> int:
    version = Path(path).parent.name
    return int(version) if version.isdigit() else 0


def _server_user() -> str | None:
    """The OS user the server runs as: None (this user) unless we are root."""
    if os.geteuid() != 0:
        return None
    wanted = os.environ.get(PG_USER_ENV)
    for name in [wanted] if wanted else ["postgres", "kernelwatch"]:
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    if wanted:
        raise EmbeddedError(f"{PG_USER_ENV}={wanted} names no user on this machine")
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "kernelwatch"],
        check=True,
        capture_output=True,
    )
    return "kernelwatch"


def _version(bin_dir: Path) -> str:
    out = subprocess.run(
        [str(bin_dir / "postgres"), "--version"], capture_output=True, text=True, check=False
    )
    found = re.search(r"\(PostgreSQL\) (\S+)", out.stdout)
    return found.group(1) if found else "unknown"
