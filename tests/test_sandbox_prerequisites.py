"""A host without what the sandbox needs (gVisor-like images: no ``useradd``, no ``unshare``,
no user namespaces): the built-in suite, which is trusted, runs with what is left and the
sandbox says what is missing; a commit's code is refused with an error that says what to do."""

from __future__ import annotations

import os

import pytest

from kernelwatch.harness import sandbox as sandbox_module
from kernelwatch.harness.sandbox import SandboxError, held_sandbox, sandbox

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox user is created as root")


@pytest.fixture
def bare_host(tmp_path, monkeypatch):
    """No useradd, no unshare on PATH, and a sandbox user that does not exist yet."""
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv(sandbox_module.USER_ENV, raising=False)
    monkeypatch.setattr(sandbox_module, "DEFAULT_USER", "kw-absent-sandbox-user")
    sandbox_module.namespaces_available.cache_clear()
    yield
    sandbox_module.namespaces_available.cache_clear()


@root_only
def test_untrusted_code_is_refused_where_the_sandbox_user_cannot_be_made(bare_host):
    with pytest.raises(SandboxError) as refused, sandbox():
        pass
    message = str(refused.value)
    assert "useradd cannot run here" in message
    assert sandbox_module.USER_ENV in message  # what to do instead


@root_only
def test_the_trusted_suite_runs_unsandboxed_there_and_the_sandbox_says_so(bare_host):
    with held_sandbox(trusted=True) as box:
        assert box.identity is None and not box.namespaces
        line = box.describe()
        # Inside the block every run's sandbox is this one: one Triton cache for all.
        with sandbox() as inner:
            assert inner is box
    assert line.startswith("unsandboxed: cannot create user 'kw-absent-sandbox-user'")
    assert "the built-in suite is trusted" in line
    assert "no network namespace: `unshare` is missing or refused here" in line
    assert not box.root.exists()


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
