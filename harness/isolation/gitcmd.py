"""Every git command kernelwatch runs, run so that the repository cannot run a program.

A tracked repository's history is untrusted, and so may be a checkout's own configuration.
So every command here runs with hooks turned off (``core.hooksPath`` at an empty place, so
neither ``.git/hooks`` nor a template's hooks run), no fsmonitor, no pager, no ``ext::``
transport, no signing program, no terminal prompt, and every key of the repository's own
configuration that names a program (a filter driver, an ssh command, a credential helper,
an askpass or upload-pack program) overridden to do nothing. Commands that take a diff run
neither an external diff nor a textconv program.

The user's and the system's configuration are not read either, so what a command does
(the demo's commits' SHAs, among others) does not depend on the machine; except for clone
and fetch, which need the operator's credential helpers, proxies and URL rewrites (that
configuration is the operator's own, and the overrides above still win over it). Git
itself reads ``uploadpack.packObjectsHook`` from no repository's configuration, only from
those.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path


class GitError(RuntimeError):
    """A git command could not run or failed; the message is one line."""


#: Settings for every command (the command's own settings win over every file's).
ALWAYS = {
    "core.hooksPath": os.devnull,
    "core.fsmonitor": "false",
    "core.pager": "cat",
    "protocol.ext.allow": "never",
    "commit.gpgSign": "false",
    "tag.gpgSign": "false",
}
#: The commands that talk to a remote, and so read the operator's configuration.
NETWORK = frozenset({"clone", "fetch"})
#: The commands that may take a diff, and the options that keep it to git's own.
DIFFS = frozenset({"diff", "log", "show"})
NO_DIFF_PROGRAMS = ("--no-ext-diff", "--no-textconv")
#: Variables that would point a command at another repository or add configuration.
DROPPED = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
)

# Keys of a repository's configuration that name a program, and what replaces each.
_PROGRAM_KEYS = (
    (re.compile(r"filter\..+\.(smudge|clean|process)"), ""),
    (re.compile(r"filter\..+\.required"), "false"),
    (re.compile(r"credential\.(.+\.)?helper"), ""),
    (re.compile(r"core\.askpass"), ""),
    (re.compile(r"remote\..+\.uploadpack"), "git-upload-pack"),
    (re.compile(r"remote\..+\.receivepack"), "git-receive-pack"),
)


def run(cwd: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    """The stdout of ``git ARGS`` run in ``cwd`` (``env``: variables set on top of this
    process's). Raises :class:`GitError` when it fails."""
    proc = _run(cwd, args, env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GitError(f"git {args[0]} in {cwd} failed: {last}")
    return proc.stdout


def probe(cwd: Path, *args: str) -> str | None:
    """The stripped stdout of ``git ARGS`` run in ``cwd``, or None when it fails (outside a
    repository, an unknown revision)."""
    proc = _run(cwd, args, None)
    return proc.stdout.strip() if proc.returncode == 0 else None


def succeeds(cwd: Path, *args: str) -> bool:
    """Whether ``git ARGS`` run in ``cwd`` exits 0 (``merge-base --is-ancestor`` answers
    so)."""
    return _run(cwd, args, None).returncode == 0


def _run(
    cwd: Path, args: tuple[str, ...], env: Mapping[str, str] | None
) -> subprocess.CompletedProcess[str]:
    environment = _environment(args[0] in NETWORK, env)
    settings = {**ALWAYS, **_neutralised(cwd, environment)}
    # Given as variables, not ``-c``: a key may hold "=" (a driver's name), which ``-c``
    # would split at.
    environment["GIT_CONFIG_COUNT"] = str(len(settings))
    for i, (key, value) in enumerate(settings.items()):
        environment |= {f"GIT_CONFIG_KEY_{i}": key, f"GIT_CONFIG_VALUE_{i}": value}
    if args[0] in DIFFS:
        args = (args[0], *NO_DIFF_PROGRAMS, *args[1:])
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=environment, capture_output=True, text=True
        )
    except OSError as exc:
        raise GitError(f"cannot run git {args[0]} in {cwd}: {exc.strerror}") from None


def _environment(operator_config: bool, env: Mapping[str, str] | None) -> dict[str, str]:
    environment = {k: v for k, v in os.environ.items() if k not in DROPPED}
    environment["GIT_TERMINAL_PROMPT"] = "0"
    if not operator_config:
        environment |= {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    return environment | dict(env or {})


def _neutralised(cwd: Path, environment: Mapping[str, str]) -> dict[str, str]:
    """Settings that override every key of the repository's own configuration (and the
    files it includes) that names a program. Reading configuration runs nothing."""
    try:
        proc = subprocess.run(
            ["git", "config", "--list", "--name-only", "--show-scope", "--includes", "-z"],
            cwd=cwd,
            env=environment,
            capture_output=True,
            text=True,
        )
    except OSError:
        return {}  # the command itself reports it
    fields = proc.stdout.split("\0")
    settings = {}
    for scope, key in zip(fields[::2], fields[1::2], strict=False):
        if scope not in ("local", "worktree"):
            continue
        replacement = next((v for p, v in _PROGRAM_KEYS if p.fullmatch(key.lower())), None)
        if key.lower() == "core.sshcommand":
            replacement = shlex.quote(environment.get("GIT_SSH") or "ssh")
        if replacement is not None:
            settings[key] = replacement
    return settings
