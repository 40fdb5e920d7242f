"""A host without what the sandbox needs (gVisor-like images: no ``unshare``, no user
namespaces): the built-in suite, which is trusted, runs with what is left and the sandbox says
what is missing; a commit's code is refused with an error that says what to do. As root, each
sandbox leases a uid of its own, which needs no account (so no ``useradd``)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kernelwatch.harness.isolation import sandbox as sandbox_module
from kernelwatch.harness.isolation.sandbox import SandboxError, held_sandbox, sandbox

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user is created as root")


@pytest.fixture
def bare_host(tmp_path, monkeypatch):
    """No ``unshare`` on PATH (no namespace can be made) and no account named."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(sandbox_module.USER_ENV, raising=False)
    sandbox_module.namespaces_available.cache_clear()
    yield
    sandbox_module.namespaces_available.cache_clear()


@root_only
def test_untrusted_code_is_refused_where_no_namespace_can_be_made(bare_host):
    with pytest.raises(SandboxError) as refused, sandbox():
        pass
    message = str(refused.value)
    assert message.startswith("untrusted kernel code is refused here")
    assert "runner" in message and "docs/SECURITY.md" in message  # what to do instead


@root_only
def test_the_trusted_suite_runs_with_what_is_left_and_the_sandbox_says_so(bare_host):
    with held_sandbox(trusted=True) as box:
        assert not box.namespaces
        # A uid of its own where this Python is readable by one; this process's otherwise.
        assert box.identity is None or box.identity.uid in sandbox_module.UID_POOL
        line = box.describe()
        # Inside the block every run's sandbox is this one: one Triton cache for all.
        with sandbox() as inner:
            assert inner is box
    assert "no network namespace: `unshare` is missing or refused here" in line
    if box.identity is None:
        assert line.startswith("unsandboxed: ") and "the built-in suite is trusted" in line
    assert not box.root.exists()


@root_only
def test_a_named_account_that_does_not_exist_is_a_one_line_error(monkeypatch):
    monkeypatch.setenv(sandbox_module.USER_ENV, "kw-absent-sandbox-user")
    refused = pytest.raises(SandboxError, match="no user 'kw-absent-sandbox-user' on this")
    with refused, sandbox():
        pass


@root_only
def test_concurrent_sandboxes_are_different_users_and_leave_nothing_behind(monkeypatch):
    """The two sides of a pair, two runs on one host: each sandbox leases a uid of its own
    (finding 4: one shared uid let a left-behind process reach later runs), and what that
    uid wrote in the shared temporary directory is gone once the sandbox is."""
    monkeypatch.delenv(sandbox_module.USER_ENV, raising=False)
    with sandbox() as first, sandbox() as second:
        uids = {first.identity.uid, second.identity.uid}
        assert len(uids) == 2 and uids <= set(sandbox_module.UID_POOL)
        left = Path(tempfile.gettempdir()) / f"kw-left-by-{first.identity.uid}"
        left.write_text("for whoever gets this uid next")
        os.chown(left, first.identity.uid, first.identity.uid)
    assert not left.exists()
    with sandbox() as again:
        # Released, yet not taken again at once: leases rotate round the pool (issue 46),
        # so whatever had escaped the last holder would not meet the next.
        assert again.identity.uid in sandbox_module.UID_POOL and again.identity.uid not in uids


def test_a_held_sandbox_is_shared_and_removed_once_at_the_end():
    with held_sandbox() as box:
        with sandbox() as first:
            (first.root / "triton" / "compiled").write_text("kept for the next stage")
        with sandbox() as second:
            assert second is box
            assert (second.root / "triton" / "compiled").exists()
    assert not box.root.exists()
    with sandbox() as fresh:
        assert fresh is not box


@root_only
def test_a_leased_uid_with_no_account_still_has_a_user_name(monkeypatch):
    """The H200 self-check of 2026-12-04 (docs/gpu/h200-2026-12-04/): two flash_attention
    decode cases failed with ``KeyError: getpwuid(): uid not found: 62000``, since code the
    child runs (torch's vendored CuTe DSL cache, Inductor's cache directory) asks
    ``getpass.getuser()``, which falls back to the password database when ``USER`` and
    ``LOGNAME`` are unset, and a leased uid has no entry there."""
    monkeypatch.delenv(sandbox_module.USER_ENV, raising=False)
    probe = "import getpass, os; print(getpass.getuser(), os.path.expanduser('~'), os.getuid())"
    with sandbox() as box:
        done = subprocess.run(
            box.command([sys.executable, "-c", probe]),
            env=box.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        name, home, uid = done.stdout.split()
        assert int(uid) == box.identity.uid
        assert name == box.identity.name and " " not in name
        assert home == str(box.home)


@root_only
def test_a_private_python_directory_is_refused_in_one_line_before_any_child(tmp_path, monkeypatch):
    """With namespaces the jail covers a private parent and binds the directory back, but it
    cannot open a directory that is itself private: an editable checkout cloned into
    ``mktemp -d`` made every child die on ``No module named 'kernelwatch.harness'``. A private
    entry of PYTHONPATH that no child needs (Python skips it) is no reason to refuse."""
    if not sandbox_module.namespaces_available():
        pytest.skip("needs namespaces: the contained path has its own test")
    parent = tmp_path / "private-parent"
    readable = parent / "site"
    readable.mkdir(parents=True)
    parent.chmod(0o700)
    readable.chmod(0o755)
    # Where an editable checkout's root is: a directory every child needs.
    needed = sandbox_module._needed_dirs()
    monkeypatch.setattr(sandbox_module, "_needed_dirs", lambda: (*needed, str(readable)))
    unused = tmp_path / "unused-on-pythonpath"
    unused.mkdir(mode=0o700)
    monkeypatch.setenv("PYTHONPATH", str(unused))
    with sandbox() as box:  # a private parent is covered by the jail: not refused
        assert box.identity is not None
    readable.chmod(0o700)
    with pytest.raises(SandboxError) as refused, sandbox():
        pass
    line = str(refused.value)
    assert "\n" not in line and f"who cannot read {readable} (it is private)" in line
    assert f"chmod o+rx {readable}" in line
