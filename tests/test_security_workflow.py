"""The pull-request workflow runs a fork only at the commit a maintainer approved, pins its
actions by SHA and hands secrets only to the steps that talk to Prefect (issue 17: the
workflow finding). The gate's decision (infra/github/pr_gate.py) is run as the workflow runs
it, on payloads shaped as GitHub sends them (tests/github/: a ``labeled`` event of a fork's
pull request, and ``gh api --paginate`` output of its reviews, two pages)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent
WORKFLOW = ROOT / "infra" / "github" / "workflows" / "pr-check.yml"
GATE = ROOT / "infra" / "github" / "pr_gate.py"
PAYLOADS = Path(__file__).parent / "github"
LABELLED = "2" * 40  # the fork's head when the maintainer applied the label
EARLIER = "1" * 40  # the commit the maintainer reviewed before the author pushed again


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _event(**changes) -> dict:
    event = json.loads((PAYLOADS / "labeled_fork.json").read_text())
    for path, value in changes.items():
        target = event
        *parents, leaf = path.split("__")
        for key in parents:
            target = target[key]
        target[leaf] = value
    return event


def _review(login: str, association: str, state: str, commit: str) -> dict:
    return {"user": {"login": login, "type": "User"}, "author_association": association,
            "state": state, "commit_id": commit}  # fmt: skip


#: Each reviewer's permission on the repository, as the workflow's step writes it from
#: ``gh api repos/R/collaborators/LOGIN/permission --jq .permission``.
PERMISSIONS = {"maintainer-a": "admin", "maintainer-b": "write", "outside-friend": "read"}


def _gate(
    tmp_path: Path, event: dict, extra_reviews: list[dict] = (), permissions: dict = PERMISSIONS
) -> dict[str, str]:
    """Run the gate as the workflow's step does; its ``$GITHUB_OUTPUT`` lines as a dict."""
    (tmp_path / "event.json").write_text(json.dumps(event))
    pages = (PAYLOADS / "reviews_race.json").read_text()
    (tmp_path / "reviews.json").write_text(pages + json.dumps(list(extra_reviews)))
    lines = "".join(f"{login}\t{permission}\n" for login, permission in permissions.items())
    (tmp_path / "permissions.tsv").write_text(lines)
    proc = subprocess.run(
        [sys.executable, str(GATE), str(tmp_path / "event.json"), str(tmp_path / "reviews.json"),
         str(tmp_path / "permissions.tsv"), "--label", "safe-to-benchmark"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines())


def test_labelled_fork_runs_only_at_the_sha_a_maintainer_approved(tmp_path):
    jobs = _workflow()["jobs"]
    decide = next(s for s in jobs["gate"]["steps"] if s.get("id") == "decide")
    assert 'pr_gate.py "$GITHUB_EVENT_PATH"' in decide["run"]
    assert jobs["gate"]["outputs"]["head"] == "${{ steps.decide.outputs.head }}"
    # The check runs at the gate's commits, never at the payload's head or a later one.
    assert jobs["check"]["env"]["HEAD"] == "${{ needs.gate.outputs.head }}"
    assert jobs["check"]["env"]["BASE"] == "${{ needs.gate.outputs.base }}"
    assert "pull_request.head.sha" not in json.dumps(jobs["check"])

    # The race: a maintainer approved EARLIER, the author pushed LABELLED, the label went on
    # LABELLED. A contributor's approval and a maintainer's comment approve nothing.
    raced = _gate(tmp_path, _event())
    assert (raced["run"], raced["remove_label"]) == ("false", "true")
    assert LABELLED[:12] in raced["reason"]

    approved = [_review("maintainer-b", "COLLABORATOR", "APPROVED", LABELLED)]
    ran = _gate(tmp_path, _event(), approved)
    assert (ran["run"], ran["head"], ran["base"]) == ("true", LABELLED, "0" * 40)

    withdrawn = [*approved, _review("maintainer-b", "COLLABORATOR", "CHANGES_REQUESTED", LABELLED)]
    assert _gate(tmp_path, _event(), withdrawn)["run"] == "false"
    dismissed = [{**approved[0], "state": "DISMISSED"}]
    assert _gate(tmp_path, _event(), dismissed)["run"] == "false"


def test_only_a_reviewer_who_can_write_to_the_repository_approves_a_fork(tmp_path):
    """``COLLABORATOR`` is also a read-only collaborator's association: the approval counts
    only from a reviewer whose permission on the repository is write, maintain or admin."""
    approved = [_review("maintainer-b", "COLLABORATOR", "APPROVED", LABELLED)]
    read_only = {**PERMISSIONS, "maintainer-b": "read"}
    assert _gate(tmp_path, _event(), approved, read_only)["run"] == "false"
    unknown = {k: v for k, v in PERMISSIONS.items() if k != "maintainer-b"}
    assert _gate(tmp_path, _event(), approved, unknown)["run"] == "false"  # not asked: no
    assert (
        _gate(tmp_path, _event(), approved, {**PERMISSIONS, "maintainer-b": "maintain"})["run"]
        == "true"
    )
    decide = next(s for s in _workflow()["jobs"]["gate"]["steps"] if s.get("id") == "decide")
    assert "/permission" in decide["run"] and "permissions.tsv" in decide["run"]


@pytest.mark.parametrize(
    ("changes", "run", "remove_label"),
    [
        (
            {"action": "opened", "pull_request__head__repo": {"full_name": "kernel-org/kernels"}},
            "true",
            "false",
        ),
        ({"action": "synchronize"}, "false", "true"),
        ({"action": "opened", "pull_request__labels": []}, "false", "false"),
        ({"label": {"name": "bug"}}, "false", "false"),
        ({"pull_request__head__repo": None}, "false", "true"),  # a deleted fork
    ],
    ids=["same-repository", "fork-new-commits", "fork-opened", "other-label", "deleted-fork"],
)
def test_gate_runs_branches_and_takes_the_label_back_from_new_fork_commits(
    tmp_path, changes, run, remove_label
):
    decision = _gate(tmp_path, _event(**changes))
    assert (decision["run"], decision["remove_label"]) == (run, remove_label)


@pytest.mark.parametrize(
    "event",
    ["[]", '{"action": "labeled"}', json.dumps(_event(pull_request__head__sha="$(id)"))],
    ids=["not-an-object", "no-pull-request", "head-not-a-sha"],
)
def test_gate_bad_payload_is_one_line_exit_2(tmp_path, event):
    (tmp_path / "event.json").write_text(event)
    (tmp_path / "reviews.json").write_text("[]")
    (tmp_path / "permissions.tsv").write_text("")
    proc = subprocess.run(
        [sys.executable, str(GATE), str(tmp_path / "event.json"), str(tmp_path / "reviews.json"),
         str(tmp_path / "permissions.tsv")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1


def test_workflow_actions_are_pinned_by_sha_and_secrets_stay_in_steps():
    workflow = _workflow()
    uses = re.findall(r"uses:\s*(\S+)", WORKFLOW.read_text())
    assert uses and all(re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", u) for u in uses), uses
    assert "secrets." not in json.dumps(workflow.get("env", {}))
    for name, job in workflow["jobs"].items():
        assert "secrets." not in json.dumps(job.get("env", {})), name
        for step in job["steps"]:
            if "pip install" in step.get("run", ""):
                assert "secrets." not in json.dumps(step), step["name"]
    proc = subprocess.run(
        [str(Path(sys.executable).with_name("check-jsonschema")), "--builtin-schema",
         "vendor.github-workflows", str(WORKFLOW)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


VERIFY = ROOT / "infra" / "github" / "verify_comment.py"
KEY = "verdict-key-of-the-tests"
BASE, HEAD = "a" * 40, "b" * 40
#: The run the workflow checks for: repository (full name), pull request, nonce.
RUN = {"repository": "acme/kernels", "pr": "7", "nonce": "9f" * 16}


def _posted(tmp_path: Path, text: str, key: str | None = KEY, head: str = HEAD, **run: str) -> str:
    """What the workflow posts for the artifact ``text``: the verifier run as the step runs
    it, with the verdict key in its environment (or none), for ``RUN`` (``run`` overrides
    its fields)."""
    comment = tmp_path / "comment.md"
    comment.write_text(text)
    env = {"PATH": "/usr/bin:/bin", **({"KERNELWATCH_VERDICT_KEY": key} if key else {})}
    wanted = {**RUN, **run}
    proc = subprocess.run(
        [sys.executable, str(VERIFY), str(comment), "--repository", wanted["repository"],
         "--pr", wanted["pr"], "--nonce", wanted["nonce"], "--base", BASE, "--head", head],
        env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return comment.read_text()


def _signed_comment(outcome: int, monkeypatch) -> str:
    """The artifact the pr_check flow publishes for a comment with ``outcome``, for ``RUN``."""
    from kernelwatch.flows import prcheck
    from kernelwatch.report.markdown import MARKER
    from kernelwatch.report.signature import Addressee

    published = []
    monkeypatch.setattr(prcheck, "create_markdown_artifact", lambda m, key: published.append(m))
    monkeypatch.setenv("KERNELWATCH_VERDICT_KEY", KEY)
    to = Addressee(RUN["repository"], int(RUN["pr"]), RUN["nonce"], BASE, HEAD)
    prcheck._publish(f"{MARKER.format(outcome=outcome)}\n# verdict\n", "kernels", to)
    (artifact,) = published
    return artifact


def test_the_workflow_posts_the_reporters_signed_verdict_as_it_was(tmp_path, monkeypatch):
    artifact = _signed_comment(2, monkeypatch)
    posted = _posted(tmp_path, artifact)
    assert posted.startswith("<!-- kernelwatch:pr-check outcome=2 -->\n# verdict")
    assert "signature" not in posted


def test_a_rewritten_or_foreign_or_unsigned_comment_is_posted_as_outcome_2(tmp_path, monkeypatch):
    """Finding 1: kernel code that reached the Prefect auth string rewrote the artifact to
    outcome=0. Rewritten, signed for another head, unsigned, or checked without the key,
    it is posted as outcome 2, saying why."""
    artifact = _signed_comment(2, monkeypatch)
    forged = artifact.replace("outcome=2", "outcome=0")
    for text, key, head, why in (
        (forged, KEY, HEAD, "does not verify"),
        (artifact, KEY, "c" * 40, "does not verify"),
        ("<!-- kernelwatch:pr-check outcome=0 -->\n# all good\n", KEY, HEAD, "does not verify"),
        (artifact, "another-key", HEAD, "does not verify"),
        (artifact, None, HEAD, "no KERNELWATCH_VERDICT_KEY"),
        ("", KEY, HEAD, "left no comment"),
    ):
        posted = _posted(tmp_path, text, key, head)
        assert posted.startswith("<!-- kernelwatch:pr-check outcome=2 -->"), posted
        assert why in posted and "outcome=0" not in posted


@pytest.mark.parametrize(
    "other",
    [
        {"nonce": "0e" * 16},  # an older run's signed comment for the same commits, replayed
        {"pr": "8"},  # the same commits opened as another pull request
        {"repository": "acme/other-kernels"},  # another repository under the same key
        {"nonce": ""},  # a run that handed no nonce: nothing can be bound to it
    ],
    ids=["another run", "another pull request", "another repository", "no nonce"],
)
def test_a_signed_comment_replayed_for_another_run_pr_or_repository_is_outcome_2(
    tmp_path, monkeypatch, other
):
    """Issue 46: the signature covered the configuration's short name and the two commits
    only, so an older signed comment for the same commits (a flaky pass) could be planted as
    this run's artifact, and one key served every repository."""
    artifact = _signed_comment(0, monkeypatch)
    assert _posted(tmp_path, artifact).startswith("<!-- kernelwatch:pr-check outcome=0 -->")
    posted = _posted(tmp_path, artifact, **other)
    assert posted.startswith("<!-- kernelwatch:pr-check outcome=2 -->"), posted
    assert "does not verify" in posted


def test_the_workflow_verifies_the_comment_before_posting_it():
    steps = [s.get("name", s.get("uses", "")) for s in _workflow()["jobs"]["check"]["steps"]]
    fetch, verify = (
        steps.index("Fetch the comment the flow wrote"),
        steps.index("Keep it only if the reporter signed it"),
    )
    assert fetch < verify < steps.index("Post or update the comment")
    step = _workflow()["jobs"]["check"]["steps"][verify]
    assert "verify_comment.py" in step["run"]
    assert step["env"] == {
        "KERNELWATCH_VERDICT_KEY": "${{ secrets.KERNELWATCH_VERDICT_KEY }}",
        "NONCE": "${{ steps.flow.outputs.nonce }}",
    }
    for bound in ('--repository "$GITHUB_REPOSITORY"', '--pr "$PR"', '--nonce "$NONCE"'):
        assert bound in step["run"], bound


def test_the_pull_requests_own_text_reaches_the_flow_as_data(tmp_path):
    """The deployment step hands the PR dashboard its number, branch and author. The branch
    and login are the pull request's text: they arrive in the flow's parameters verbatim,
    and nothing in them runs."""
    (check,) = [
        j
        for j in _workflow()["jobs"].values()
        if "steps" in j
        and any(
            s.get("name") == "Start the pr_check deployment on the GPU pool" for s in j["steps"]
        )
    ]
    (step,) = [s for s in check["steps"] if s.get("id") == "flow"]
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "prefect").write_text(
        '#!/bin/sh\nprintf "%s\\0" "$@" > "$ARGS"\necho "Created flow run. UUID: 0-1"\n'
    )
    (fake / "prefect").chmod(0o755)
    branch = 'x$(touch pwned)`touch pwned`"; touch pwned #'
    env = {"PATH": f"{fake}:/usr/bin:/bin", "ARGS": str(tmp_path / "args"), "PR": "42",
           "BRANCH": branch, "AUTHOR": "mallory", "BASE": "a" * 40, "HEAD": "1" * 39 + "e",
           "REPOSITORY": "llm-kernels", "POOL": "gpu-h100", "GITHUB_REPOSITORY": "acme/kernels",
           "GITHUB_OUTPUT": str(tmp_path / "out")}  # fmt: skip
    proc = subprocess.run(["bash", "-eo", "pipefail", "-c", step["run"]], cwd=tmp_path, env=env,
                          capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    args = (tmp_path / "args").read_text().split("\0")
    params = json.loads(args[args.index("--params") + 1])
    nonce = params.pop("nonce")
    assert params == {"base": "a" * 40, "head": "1" * 39 + "e", "repository": "llm-kernels",
                      "pr_number": 42, "branch": branch, "author": "mallory",
                      "github_repository": "acme/kernels"}  # fmt: skip
    # The nonce the run hands the flow, and keeps for the verifier: 128 random bits.
    assert re.fullmatch(r"[0-9a-f]{32}", nonce)
    assert f"nonce={nonce}" in (tmp_path / "out").read_text()
    assert not (tmp_path / "pwned").exists()
