"""Whether kernelwatch checks a pull request on the GPU fleet, and at which commits: the
decision of ``workflows/pr-check.yml``'s gate job, from the event's payload and the pull
request's reviews (``GET /repos/{repo}/pulls/{n}/reviews``, every page).

A pull request from the repository itself runs at its head. A fork's runs only when a
maintainer applies the trust label, and only at a commit a maintainer approved: the head the
label was applied to (the payload's ``pull_request.head.sha``) must be the ``commit_id`` of an
approving review by an owner, member or collaborator who can write to the repository (its
permission, asked of GitHub per reviewer: a read-only collaborator is a ``COLLABORATOR``
too) and whose latest verdict is still that approval. A label on anything else is taken
back, and so is the label when new commits arrive; the run uses the approved SHA, never
whatever the head is later.

Standard library only: it runs on GitHub's runner before anything is installed. Prints the
decision as ``key=value`` lines for ``$GITHUB_OUTPUT``; bad input is one line and exit 2.

    python3 pr_gate.py EVENT.json REVIEWS.json PERMISSIONS.tsv [--label safe-to-benchmark]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_LABEL = "safe-to-benchmark"
#: Who may approve a fork's commit for the fleet (``author_association`` of the review).
MAINTAINERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
#: ...and the permissions on the repository that may (GitHub's ``.permission`` says
#: ``write`` for maintain; ``maintain`` is the ``role_name``'s word).
WRITERS = frozenset({"admin", "maintain", "write"})
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\[bot\])?")
#: Review states that change a reviewer's verdict; a plain comment does not.
_VERDICTS = frozenset({"APPROVED", "CHANGES_REQUESTED", "DISMISSED"})
_SHA = re.compile(r"[0-9a-f]{40}([0-9a-f]{24})?")


class GateError(ValueError):
    """The payload or the reviews are not what GitHub sends."""


@dataclass(frozen=True)
class Decision:
    """Run the check at ``base``..``head`` or not; take the trust label back or not."""

    run: bool
    base: str
    head: str
    remove_label: bool
    reason: str

    def outputs(self) -> str:
        """The decision as ``$GITHUB_OUTPUT`` lines."""
        fields = {
            "run": str(self.run).lower(),
            "base": self.base,
            "head": self.head,
            "remove_label": str(self.remove_label).lower(),
            "reason": self.reason,
        }
        return "".join(f"{key}={value}\n" for key, value in fields.items())


def approved_commits(reviews: list[dict[str, Any]], permissions: dict[str, str]) -> set[str]:
    """The commits a maintainer approved and still stands by: each maintainer's latest
    verdict (reviews come oldest first), where it is an approval. A maintainer is a reviewer
    of a maintaining association whose permission (``permissions``; missing: none) writes."""
    latest: dict[str, dict[str, Any]] = {}
    for review in reviews:
        login = str((review.get("user") or {}).get("login"))
        maintainer = (
            review.get("author_association") in MAINTAINERS and permissions.get(login) in WRITERS
        )
        if review.get("state") in _VERDICTS and maintainer:
            latest[login] = review
    return {
        str(review["commit_id"])
        for review in latest.values()
        if review["state"] == "APPROVED" and review.get("commit_id")
    }


def decide(
    event: dict[str, Any],
    reviews: list[dict[str, Any]],
    permissions: dict[str, str],
    label: str = DEFAULT_LABEL,
) -> Decision:
    """The gate's decision for one ``pull_request_target`` event."""
    try:
        action = event["action"]
        pull = event["pull_request"]
        head, base = pull["head"]["sha"], pull["base"]["sha"]
        # A deleted fork leaves head.repo null: still not this repository.
        source = (pull["head"].get("repo") or {}).get("full_name")
        fork = source != event["repository"]["full_name"]
        labelled = any(entry.get("name") == label for entry in pull.get("labels") or [])
        applied = (event.get("label") or {}).get("name")
    except (KeyError, TypeError, AttributeError) as exc:
        raise GateError(f"not a pull_request event payload: missing {exc}") from None
    for name, sha in (("head", head), ("base", base)):
        if not isinstance(sha, str) or not _SHA.fullmatch(sha):
            raise GateError(f"pull_request.{name}.sha is not a commit SHA: {sha!r}")

    def verdict(run: bool, reason: str, remove_label: bool = False) -> Decision:
        return Decision(run, base, head, remove_label, reason)

    if action == "labeled":
        if applied != label:
            return verdict(False, f"label {applied!r} starts nothing")
        if not fork:
            return verdict(True, f"{label} on a branch of this repository")
        if head in approved_commits(reviews, permissions):
            return verdict(True, f"a maintainer approved {head[:12]}, the labelled commit")
        return verdict(
            False,
            f"no maintainer's standing approval is for {head[:12]}, the commit that was "
            f"labelled: approve that commit in a review, then apply {label} again",
            remove_label=True,
        )
    if not fork:
        return verdict(True, f"{action} on a branch of this repository")
    if action == "synchronize" and labelled:
        return verdict(
            False,
            f"new commits nobody has approved: kernelwatch times this pull request again "
            f"once a maintainer approves the new head and re-applies {label}",
            remove_label=True,
        )
    return verdict(False, f"a fork's pull request waits for a maintainer's approval and {label}")


def read_reviews(text: str) -> list[dict[str, Any]]:
    """Reviews from ``gh api --paginate``'s output: one JSON array per page, back to back."""
    decoder, reviews, at = json.JSONDecoder(), [], 0
    while at < len(text.rstrip()):
        while text[at].isspace():
            at += 1
        page, at = decoder.raw_decode(text, at)
        if not isinstance(page, list) or not all(isinstance(r, dict) for r in page):
            raise GateError("the reviews are not JSON arrays of review objects")
        reviews.extend(page)
    return reviews


def read_permissions(text: str) -> dict[str, str]:
    """``login<TAB>permission`` lines, as the workflow writes them, into a dict."""
    permissions = {}
    for number, line in enumerate(text.splitlines(), 1):
        login, tab, permission = line.partition("\t")
        if not tab or not _LOGIN.fullmatch(login) or not permission.isalpha():
            raise GateError(f"permissions line {number} is not 'login<TAB>permission'")
        permissions[login] = permission
    return permissions


def main(argv: list[str] | None = None) -> int:
    """Print the decision for ``$GITHUB_OUTPUT``; one line on stderr and exit 2 on bad input."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("event", type=Path, help="the event payload ($GITHUB_EVENT_PATH)")
    parser.add_argument("reviews", type=Path, help="the pull request's reviews, every page")
    parser.add_argument(
        "permissions", type=Path, help="each reviewer's permission: 'login<TAB>permission' lines"
    )
    parser.add_argument("--label", default=DEFAULT_LABEL, help="the trust label")
    args = parser.parse_args(argv)
    try:
        event = json.loads(args.event.read_text())
        reviews = read_reviews(args.reviews.read_text())
        permissions = read_permissions(args.permissions.read_text())
        decision = decide(event, reviews, permissions, args.label)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(decision.outputs())
    print(f"kernelwatch gate: run={str(decision.run).lower()}: {decision.reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
