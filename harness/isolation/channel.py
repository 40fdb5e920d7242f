"""The authenticated result channel between a child that runs kernel code and its parent.

Each event line is ``<mac> <json>``: an HMAC-SHA256, under a key the parent makes for this
child alone, of the line's sequence number and its JSON. The key travels on the child's
stdin with the plan (not in its argv or environment, which other processes of the same
user can read), and the child makes itself non-dumpable before it reads it, so no other
process of the sandbox user can read its memory or open its file descriptors. What kernel
code writes anywhere else (stdout, stderr, files, another process's pipe) is never read as
an event, and a line on the channel that does not carry the next valid MAC is refused.

What this cannot stop, and docs/SECURITY.md says so: code running in the child itself can
find the key and the channel in its own memory, or change the harness's functions, and so
misreport its own cases. The parent limits what such a report can claim (one result per
case it began, in order; see ``supervise.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import hmac
import json
import secrets
from typing import IO, Any

_PR_SET_DUMPABLE = 4


class Forged(ValueError):
    """A line on the result channel that is not the next authenticated event."""


def new_key() -> str:
    """A fresh key for one child, as the hex string its plan carries."""
    return secrets.token_hex(32)


def _mac(key: bytes, sequence: int, body: bytes) -> str:
    return hmac.new(key, b"%d:" % sequence + body, hashlib.sha256).hexdigest()


class Writer:
    """The child's end: writes each event with the next sequence number's MAC."""

    def __init__(self, stream: IO[str], key: str) -> None:
        self._stream = stream
        self._key = bytes.fromhex(key)
        self._sequence = 0

    def send(self, event: dict[str, Any]) -> None:
        body = json.dumps(event, allow_nan=False)
        mac = _mac(self._key, self._sequence, body.encode())
        self._sequence += 1
        self._stream.write(f"{mac} {body}\n")
        self._stream.flush()


class Reader:
    """The parent's end: checks each line's MAC and order, and returns its event."""

    def __init__(self, key: str) -> None:
        self._key = bytes.fromhex(key)
        self._sequence = 0

    def read(self, line: bytes) -> dict[str, Any]:
        """The event ``line`` carries; raises :class:`Forged` for anything else (a line
        without the right MAC, out of order, or cut short by a dying child)."""
        mac, _, body = line.rstrip(b"\n").partition(b" ")
        expected = _mac(self._key, self._sequence, body)
        if not hmac.compare_digest(mac, expected.encode()):
            raise Forged("a line on the result channel without a valid signature")
        try:
            event = json.loads(body)
        except ValueError:
            raise Forged("a signed line on the result channel that is not JSON") from None
        if not isinstance(event, dict):
            raise Forged("a signed line on the result channel that is not an event")
        self._sequence += 1
        return event


def protect_process() -> None:
    """Make this process non-dumpable: no other process of the same user may then read its
    memory, ptrace it or open its ``/proc/PID/fd``. Linux only; elsewhere nothing."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
