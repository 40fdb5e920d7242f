"""Secrets kept out of everything kernelwatch prints, logs, stores or publishes: URLs lose
their user info (``user:password@``, a token) and query, and a webhook URL its path too
(Slack's and most webhooks' secret is the path). And terminal control kept out of what a
kernel wrote (:func:`printable`): its errors and parameters reach tables and one-line
errors, where an escape sequence could clear the screen, retitle the terminal or plant an
OSC 8 link."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# libpq's key=value form, which psycopg's messages and a DSN that is not a URL use: a value
# quoted (its quote possibly unterminated, when it is what failed to parse) or bare.
_KEYWORD = re.compile(r"\b((?:ssl)?password\s*=\s*)(?:'(?:[^'\\]|\\.)*'?|[^\s'\"<>]+)", re.I)
# ESC or CSI (C1) sequences: CSI ... final byte, OSC/DCS/APC/PM/SOS ... BEL or ST, or a
# lone two-byte escape; then any other C0/C1 control character but tab and newline.
_ESCAPE = re.compile(
    r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"
    r"|(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f]).*?(?:\x07|\x1b\\|\x9c|$)"
    r"|\x1b[ -~]?",
    re.S,
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def redact_url(url: str, keep_path: bool = True) -> str:
    """``url`` without user info or query, and without its path unless ``keep_path``
    (a repository's path says where it is; a webhook's path is its secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return MASK
    netloc = (f"{MASK}@" if "@" in parts.netloc else "") + host + (f":{port}" if port else "")
    path = parts.path if keep_path else (f"/{MASK}" if parts.path.strip("/") else parts.path)
    return urlunsplit((parts.scheme, netloc, path, MASK if parts.query else "", ""))


def redact(text: str, *secrets: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`, paths kept), every
    ``password=`` / ``sslpassword=`` value masked, and each of ``secrets`` (a webhook URL, a
    token) replaced wherever it appears."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _KEYWORD.sub(lambda m: m.group(1) + MASK, text)
    return _URL.sub(lambda m: redact_url(m.group(0)), text)


def printable(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (tab and newline
    kept), for a terminal, a log or a table."""
    return _CONTROL.sub("", _ESCAPE.sub("", text))
