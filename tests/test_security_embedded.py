"""The embedded server's directory is whatever ``KERNELWATCH_PG_DIR`` names: it deletes and
re-owns only what it created, follows no symbolic link, suggests no world-writable
directory, makes no cluster over a live server, and says why a start failed (issue 17,
finding: the embedded server's directory handling).

The directories live directly under /tmp: as root the server's user must reach them."""

from __future__ import annotations

import os
import pwd
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import psycopg
import pytest

from kernelwatch.store.embedded import EmbeddedError, EmbeddedServer

# Written literally, not imported: the same tests run against code that predates the marker.
MARKER = ".kernelwatch-embedded"
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="only as root is the server another user")


@pytest.fixture
def scratch():
    """A fresh directory directly under /tmp, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="kw-emb-", dir="/tmp"))
    os.chmod(path, 0o755)
    yield path
    EmbeddedServer(path / "pg").stop(mode="immediate")
    shutil.rmtree(path, ignore_errors=True)


def _ours(root: Path) -> Path:
    """``root`` as kernelwatch leaves it after a first start: a directory with the marker."""
    root.mkdir(mode=0o700)
    (root / MARKER).write_text("")
    return root


def test_embedded_server_never_wipes_a_data_directory_it_did_not_create(scratch):
    root = scratch / "pg"
    (root / "data").mkdir(parents=True)
    (root / "data" / "precious.txt").write_text("not kernelwatch's")
    with pytest.raises(EmbeddedError, match=MARKER):
        EmbeddedServer(root).ensure_running()
    assert (root / "data" / "precious.txt").read_text() == "not kernelwatch's"
    assert not (root / MARKER).exists()


def test_embedded_server_refuses_symlinks_and_reowns_nothing_else(scratch):
    elsewhere = scratch / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    (elsewhere / "file").write_text("keep")
    before = elsewhere.stat()

    linked = scratch / "linked"
    linked.symlink_to(elsewhere)
    with pytest.raises(EmbeddedError, match="symbolic link"):
        EmbeddedServer(linked).ensure_running()

    for name, target in (("run", elsewhere), ("lock", elsewhere / "file")):
        root = _ours(scratch / f"pg-{name}")
        (root / name).symlink_to(target)
        with pytest.raises(EmbeddedError, match="symbolic link"):
            EmbeddedServer(root).ensure_running()
        assert not (root / "data").exists()

    after = elsewhere.stat()
    assert (after.st_uid, after.st_gid, stat.S_IMODE(after.st_mode)) == (
        before.st_uid, before.st_gid, stat.S_IMODE(before.st_mode),
    )  # fmt: skip
    assert (elsewhere / "file").read_text() == "keep"
    assert sorted(p.name for p in elsewhere.iterdir()) == ["file"]


@ROOT_ONLY
def test_embedded_server_as_root_reowns_no_directory_of_another_user(scratch):
    nobody = pwd.getpwnam("nobody")
    root = scratch / "pg"
    root.mkdir()
    os.chown(root, nobody.pw_uid, nobody.pw_gid)
    with pytest.raises(EmbeddedError, match="belongs to user nobody"):
        EmbeddedServer(root).ensure_running()
    assert root.stat().st_uid == nobody.pw_uid and list(root.iterdir()) == []


def _nearest_existing(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


@ROOT_ONLY
def test_embedded_server_errors_never_suggest_a_world_writable_directory(scratch):
    private = scratch / "private"
    private.mkdir(mode=0o700)
    root = private / "pg"
    with pytest.raises(EmbeddedError) as caught:
        EmbeddedServer(root).ensure_running()
    message = str(caught.value)
    assert "cannot reach" in message
    suggested = [Path(p.rstrip(".,;)")) for p in re.findall(r"/[\w./-]+", message)]
    suggested = [p for p in suggested if not str(p).startswith(str(scratch))]
    assert suggested, message
    for path in suggested:
        mode = _nearest_existing(path).stat().st_mode
        assert not mode & stat.S_IWOTH, f"{path} is world-writable: {message}"


def test_embedded_server_checks_for_a_live_server_before_initdb(scratch):
    root = _ours(scratch / "pg")
    (root / "data").mkdir()
    (root / "data" / "half-made").write_text("a cluster a live server still uses")
    (root / "run").mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as live:
        live.bind(str(root / "run" / ".s.PGSQL.5432"))
        live.listen()
        with pytest.raises(EmbeddedError, match="a server answers on"):
            EmbeddedServer(root).ensure_running()
    assert (root / "data" / "half-made").exists()


def test_embedded_server_start_error_shows_the_server_logs_last_line(scratch):
    root = _ours(scratch / "pg")
    # A cluster that names its version but lacks its configuration: postgres refuses it
    # and says why in the server log, not on pg_ctl's output.
    (root / "data").mkdir(mode=0o755)
    (root / "data" / "PG_VERSION").write_text("15\n")
    with pytest.raises(EmbeddedError) as caught:
        EmbeddedServer(root).ensure_running()
    message = str(caught.value)
    assert "postgresql.conf" in message, message
    assert message.count("\n") == 0


def test_every_connection_to_the_embedded_server_authenticates(scratch):
    """Reaching the socket is not enough (issue 29, finding 2: a child that reached it was
    the superuser): without the password file the server refuses, and a cluster an earlier
    kernelwatch made with trust authentication is moved to passwords on its next start."""
    server = EmbeddedServer(scratch / "pg")
    server.ensure_running()
    hba = server.data_dir / "pg_hba.conf"
    trusting = re.compile(r"^[^#]*\btrust\b", re.MULTILINE)

    def refused_without_password() -> bool:
        try:
            psycopg.connect(server.url("postgres").split("&passfile=")[0]).close()
        except psycopg.OperationalError as exc:
            return "password" in str(exc)
        return False

    assert not trusting.search(hba.read_text())
    assert refused_without_password()
    assert stat.S_IMODE(server.password_file.stat().st_mode) == 0o600
    server.stop()
    hba.write_text(hba.read_text().replace("scram-sha-256", "trust"))
    server.password_file.unlink()
    assert server.ensure_running().started
    assert not trusting.search(hba.read_text())
    assert refused_without_password()
    with psycopg.connect(server.url("postgres")) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
