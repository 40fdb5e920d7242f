"""Secrets kept out of everything kernelwatch prints, logs, stores or publishes: URLs lose
their user info (``user:password@``, a token) and query, and a webhook URL its path too
(Slack's and most webhooks' secret is the path)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")


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
    """``text`` with every URL in it redacted (:func:`redact_url`, paths kept) and each of
    ``secrets`` (a webhook URL, a token) replaced wherever it appears."""
    for secret in sorted(filter(None, secrets), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return _URL.sub(lambda m: redact_url(m.group(0)), text)
