"""The pull-request comment's signature, so that what the GitHub workflow posts is the
reporter's verdict and nobody else's (issue 29, finding 1: kernel code that reached the
Prefect auth string rewrote the flow run's artifact to ``outcome=0``).

The reporter, the flow that stored and decided the verdict, appends an HMAC-SHA256 of the
comment, bound to the repository and the two commits, under the verdict key
(``KERNELWATCH_VERDICT_KEY``), which only it and the workflow's environment hold: never the
runner, never Prefect. ``infra/github/verify_comment.py`` checks it with the standard
library before anything is posted (the same format, tested against this module); a comment
that is unsigned, altered, or signed for other commits is posted as ``outcome=2``.
"""

from __future__ import annotations

import hashlib
import hmac

#: The environment variable the reporter reads the key from (``_FILE`` in a deployment,
#: which the image's entry point turns into the variable).
KEY_ENV = "KERNELWATCH_VERDICT_KEY"
#: The comment's last line: ``<!-- kernelwatch:signature sha256=HEX -->``.
PREFIX = "<!-- kernelwatch:signature sha256="
SUFFIX = " -->"


def digest(body: str, key: str, repository: str, base: str, head: str) -> str:
    """The HMAC of ``body`` for the comparison of ``base`` and ``head`` in ``repository``."""
    message = "\n".join((repository, base, head, body)).encode()
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def sign(markdown: str, key: str, repository: str, base: str, head: str) -> str:
    """``markdown`` with its signature line appended."""
    body = markdown.rstrip("\n") + "\n"
    return f"{body}{PREFIX}{digest(body, key, repository, base, head)}{SUFFIX}\n"
