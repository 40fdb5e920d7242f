"""Post only the reporter's verdict: check the signature of the comment the pr_check flow
wrote (``report/signature.py`` makes it) before ``workflows/pr-check.yml`` posts it.

The comment's last line is an HMAC-SHA256, under the verdict key only the reporter and this
workflow's environment hold, of the comment bound to the repository's full name, the pull
request's number, the nonce this workflow run handed the flow and the two commits the gate
chose: a signed comment of another run (an older, flaky pass), pull request or repository
does not verify. A comment that verifies is written back without that line; anything else (no
comment, no signature, another comment's, an altered one, no key configured) becomes a
comment with ``outcome=2`` that says why, so the check fails closed.

Standard library only: it runs on GitHub's runner before anything is installed.

    KERNELWATCH_VERDICT_KEY=... python3 verify_comment.py COMMENT.md --repository OWNER/NAME \
        --pr N --nonce NONCE --base SHA --head SHA
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import sys
from pathlib import Path

KEY_ENV = "KERNELWATCH_VERDICT_KEY"
PREFIX = "<!-- kernelwatch:signature sha256="
SUFFIX = " -->"
VERSION = "kernelwatch-pr-check-2"
MARKER = "<!-- kernelwatch:pr-check outcome=2 -->"


def verified(
    text: str, key: str, repository: str, pr: str, nonce: str, base: str, head: str
) -> str | None:
    """The comment without its signature line when that line signs it for this repository
    (``owner/name``), pull request, workflow run (``nonce``) and commits."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    if not (last.startswith(PREFIX) and last.endswith(SUFFIX)) or not key or not nonce:
        return None
    body += "\n"
    message = "\n".join((VERSION, repository, pr, nonce, base, head, body)).encode()
    expected = hmac.new(key.encode(), message, hashlib.sha256).hexdigest()
    given = last[len(PREFIX) : -len(SUFFIX)]
    return body if hmac.compare_digest(given, expected) else None


def refusal(why: str) -> str:
    return (
        f"{MARKER}\n### ⚠️ kernelwatch could not check this pull request\n\n"
        f"The comment for this head was not posted: {why}. Its flow run's logs are in "
        "Prefect.\n"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("comment", type=Path)
    parser.add_argument("--repository", required=True, help="owner/name")
    parser.add_argument("--pr", required=True, help="the pull request's number")
    parser.add_argument("--nonce", required=True, help="what this run handed the flow")
    parser.add_argument("--base", required=True)
    parser.add_argument("--head", required=True)
    args = parser.parse_args(argv)
    key = os.environ.get(KEY_ENV, "")
    try:
        text = args.comment.read_text(encoding="utf-8") if args.comment.exists() else ""
    except (OSError, UnicodeDecodeError) as exc:
        print(f"verify_comment: cannot read {args.comment}: {exc}", file=sys.stderr)
        return 2
    if not key:
        why = f"the workflow's environment has no {KEY_ENV} secret to check its signature"
        args.comment.write_text(refusal(why), encoding="utf-8")
        return 0
    if not text.strip():
        args.comment.write_text(refusal("the flow run left no comment"), encoding="utf-8")
        return 0
    body = verified(text, key, args.repository, args.pr, args.nonce, args.base, args.head)
    if body is None:
        why = (
            "its signature does not verify (not the reporter's verdict for these commits of "
            "this pull request, in this run)"
        )
        args.comment.write_text(refusal(why), encoding="utf-8")
        return 0
    args.comment.write_text(body, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
