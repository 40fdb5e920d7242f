"""Issue 48: a case's build identity from real builds of a suite edited one way at a time,
each edit a commit of one git repository built from its own worktree, as a PR check does.
An edit that leaves the GPU work as it was (a comment inside a kernel, the module's
docstring) keeps every case's identity; one that changes it (a launch grid with the same
code, a helper ``@triton.jit`` function, a workload's shapes, how inputs are made) changes
the identity of the cases it reaches and no other; a library call in a launch makes the
case's identity unknown, which never equals anything. Each kernel has a dtype that is built
(fp16: its SASS is compared) and one that is only recorded (fp32: its build's cache key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import git, repository_of

from kernelwatch.analysis.build_identity import case_key, identical, identities
from kernelwatch.harness.build.stage import BuildRequest, BuildResult, run_build
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.suite import SuiteRef

SUITE = Path(__file__).parent / "planted" / "identity_suite.py"
SCALE, COPY = "scale", "copy"

#: Each edit of the suite's text (old -> new), and the kernels whose cases it must change.
EDITS = {
    "a comment line inside a kernel": (
        "    tl.store(y_ptr + offs, _twice(x), mask=mask)",
        "    # the doubling is its own function, shared with other kernels\n"
        "    tl.store(y_ptr + offs, _twice(x), mask=mask)",
        set(),
    ),
    "the module's docstring": ('"""A two-kernel suite', '"""A small two-kernel suite', set()),
    "only a launch grid, the same code": ("GRID_EXTRA = 0", "GRID_EXTRA = 1", {SCALE}),
    "a helper @triton.jit function the kernel calls": (
        "return x * 2.0",
        "return x * 3.0",
        {SCALE},
    ),
    "a workload's shapes": ('SCALE_CASES = ({"n": 70},)', 'SCALE_CASES = ({"n": 90},)', {SCALE}),
    "how the inputs are made": ("torch.randn(int(", "torch.rand(int(", {SCALE, COPY}),
    "a library call in a launch": (
        "    for _ in range(2):",
        "    torch.mm(t['x'][None, :], t['x'][:, None])\n    for _ in range(2):",
        {COPY},
    ),
}


def _build(repo: Path, sha: str, cache: Path) -> BuildResult:
    with checkout(repo, sha) as tree:
        suite = SuiteRef(str(tree.path / SUITE.name))
        request = BuildRequest(suite, archs=("sm_90a",), workload="smoke", every_dtype=True,
                               cache_dir=str(cache), workers=1)  # fmt: skip
        return run_build(request)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    root = tmp_path_factory.mktemp("identity")
    repo = root / "repo"
    sha = repository_of(repo, {SUITE.name: SUITE}, "two kernels")
    built = _build(repo, sha, root / "cache")
    return root, repo, sha, built, identities(built.recipes, built.records)


def test_every_case_of_the_suite_has_an_identity_and_each_launch_its_position(base):
    *_, built, ids = base
    cases = {case_key(k, d, p) for k, d, p in ((SCALE, "fp16", {"n": 70}), (SCALE, "fp32",
             {"n": 70}), (COPY, "fp16", {"n": 40}), (COPY, "fp32", {"n": 40}))}  # fmt: skip
    assert set(ids) == cases and None not in ids.values(), ids
    assert {r.dtype for r in built.records} == {"fp16"}  # fp32 is recorded, not built
    (copy,) = [r for r in built.recipes if r.kernel == "copy" and r.dtype == "fp16"]
    assert [s.position for s in copy.steps] == [0, 1], copy.steps
    # The same specialisation is built once, and both launches name that build.
    assert {(s.build_case, s.build_index) for s in copy.steps} == {("n=40", 0)}
    assert all(r.sass_sha256 for r in built.records), built.records


@pytest.mark.parametrize("edit", EDITS)
def test_an_edit_changes_the_identity_of_exactly_the_cases_it_reaches(base, edit):
    root, repo, sha, _, before = base
    old, new, reached = EDITS[edit]
    text = SUITE.read_text()
    assert text.count(old) == 1, old
    # A branch off the base with the one edit, as a pull request's head.
    git(repo, "checkout", "-q", "--detach", sha)
    (repo / SUITE.name).write_text(text.replace(old, new))
    git(repo, "commit", "-qam", edit)
    built = _build(repo, git(repo, "rev-parse", "HEAD"), root / "cache")
    assert all(r.status == "ok" for r in built.records), [r.reason for r in built.records]
    after = identities(built.recipes, built.records)
    same = identical(before, after)
    changed = {kernel for kernel, dtype, params in after if (kernel, dtype, params) not in same}
    assert changed == reached, (edit, before, after)
