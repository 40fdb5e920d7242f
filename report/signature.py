"""The pull-request comment's signature, so that what the GitHub workflow posts is the
reporter's verdict and nobody else's (issue 29, finding 1: kernel code that reached the
Prefect auth string rewrote the flow run's artifact to ``outcome=0``).

The reporter, the flow that stored and decided the verdict, appends an HMAC-SHA256 of the
comment, bound to the repository's full name, the pull request, the workflow run's nonce
and the two commits (:class:`Addressee`), under the verdict key
(``KERNELWATCH_VERDICT_KEY``), which only it and the workflow's environment hold: never the
runner, never Prefect. ``infra/github/verify_comment.py`` checks it with the standard
library before anything is posted (the same format, tested against this module); a comment
that is unsigned, altered, or signed for other commits, another pull request, another
repository or another run is posted as ``outcome=2``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

#: The environment variable the reporter reads the key from (``_FILE`` in a deployment,
#: which the image's entry point turns into the variable).
KEY_ENV = "KERNELWATCH_VERDICT_KEY"
#: The comment's last line: ``<!-- kernelwatch:signature sha256=HEX -->``.
PREFIX = "<!-- kernelwatch:signature sha256="
SUFFIX = " -->"
#: The first line of every signed message: a comment signed under an older format never
#: verifies under this one.
VERSION = "kernelwatch-pr-check-2"


@dataclass(frozen=True)
class Addressee:
    """What a signature binds a comment to, besides the key: the full name of the repository
    the pull request is on (``owner/name``, not the configuration's short name, which two
    repositories may share under one key), the pull request's number, the nonce the
    workflow run handed the flow (so an older signed comment for the same commits, a flaky
    pass, cannot be planted as this run's), and the two commits."""

    repository: str
    pr: int | None
    nonce: str
    base: str
    head: str

    def message(self, body: str) -> bytes:
        """The signed bytes: the version, each field on its own line, then ``body``."""
        pr = "" if self.pr is None else str(self.pr)
        fields = (VERSION, self.repository, pr, self.nonce, self.base, self.head, body)
        return "\n".join(fields).encode()


def digest(body: str, key: str, to: Addressee) -> str:
    """The HMAC of ``body`` addressed ``to`` one run of one pull request."""
    return hmac.new(key.encode(), to.message(body), hashlib.sha256).hexdigest()


def sign(markdown: str, key: str, to: Addressee) -> str:
    """``markdown`` with its signature line appended."""
    body = markdown.rstrip("\n") + "\n"
    return f"{body}{PREFIX}{digest(body, key, to)}{SUFFIX}\n"
