"""A demo kernel repository: a short nightly history in which one commit plants a regression.

``make_demo_repo`` writes a fresh git repository holding ``kwdemo/``, a suite made from three
of the built-in kernels (RMSNorm, softmax, SiLU-and-mul), copied from the installed
``kernelwatch.kernels`` when the demo is made, so the demo always runs the real kernels. Its
history is ``nights`` nights of ``commits_per_night`` commits. All but one are ordinary work
(docs, tuning notes, a comment in a host-side helper) that leaves every compiled kernel as it
was, so the build cache serves them. One commit in the middle of night ``culprit_night`` makes
RMSNorm sum its squares 32 columns at a time in a loop over the row: it still passes the
correctness check, the build stage flags it (instruction growth; occupancy at LLM shapes),
and it runs about 3x slower in Triton's CPU interpreter. ``kernelwatch demo``, the main job,
runs the nightly pipeline over this history (docs/DEMO.md).

The history is planned by pure functions (``demo_sources``, ``plan_history``); only
``make_demo_repo`` writes files and runs git. Dates, author and messages are fixed by the
arguments, so the same arguments (and the same kernels) give the same commit SHAs.
"""

from __future__ import annotations

import importlib.util
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from kernelwatch.harness.isolation import gitcmd

#: The suite module inside the demo repository (``--suite kwdemo --repo PATH``).
SUITE_MODULE = "kwdemo"
#: The kernel the planted commit slows down.
CULPRIT_KERNEL = "rms_norm"
AUTHOR = "kernelwatch demo"
AUTHOR_EMAIL = "demo@kernelwatch.invalid"
FIRST_DAY = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)
#: Commits of one day are this far apart, from 09:00; the nightly runs after the last one.
COMMIT_SPACING = timedelta(minutes=40)
MAX_COMMITS_PER_NIGHT = 12

_KERNELS_PACKAGE = "kernelwatch.kernels"
#: Files copied from the built-in suite, and the ones among them that import each other.
_COPIED = ("inputs.py", "rmsnorm.py", "softmax.py", "activation.py")
_IMPORTERS = ("rmsnorm.py", "softmax.py", "activation.py")
_CULPRIT_FILE = "kwdemo/rmsnorm.py"

_REDUCTION = "    mean_sq = tl.sum(x * x, axis=0) / n_cols\n"
# A loop over the row whose trip count is only known at run time: no compiler can remove it,
# each pass is a full-tile select, multiply and sum, and the result is the same sum of squares.
_CHUNKED_REDUCTION = """\
    # Add the squares up 32 columns at a time, the order torch's reduction uses, so long rows
    # round the way the reference does.
    sum_sq = 0.0
    for start in range(0, n_cols, 32):
        part = tl.where((cols >= start) & (cols < start + 32), x, 0.0)
        sum_sq += tl.sum(part * part, axis=0)
    mean_sq = sum_sq / n_cols
"""
_CULPRIT_MESSAGE = """\
rms_norm: sum the squares in 32-column chunks, as torch does

Rows of 8192 drifted from the reference in the last bit on some inputs. Accumulating chunk
by chunk follows the order torch's reduction adds in; the correctness suite passes.
"""
_FIRST_MESSAGE = "Import the serving kernels as the kwdemo suite"

_SUITE_INIT = '''\
"""kwdemo: the kernels our serving stack runs between the GEMMs, as a kernelwatch suite."""

from dataclasses import replace

from kernelwatch.harness.spec import KernelSpec, Params, Suite
from kwdemo.activation import SILU_AND_MUL
from kwdemo.rmsnorm import RMS_NORM
from kwdemo.softmax import SOFTMAX


def nightly(spec: KernelSpec, case: Params) -> KernelSpec:
    """``spec`` with a one-case ``smoke`` workload: a few programs, so a nightly in the CPU
    interpreter takes seconds and still times steadily. ``llm`` stays the kernel's own."""
    return replace(spec, workloads={"smoke": (case,), "llm": spec.workloads["llm"]})


SUITE = Suite(
    name="kwdemo",
    kernels=(
        nightly(RMS_NORM, {"tokens": 4, "hidden": 200}),
        nightly(SOFTMAX, {"rows": 4, "cols": 200}),
        nightly(SILU_AND_MUL, {"tokens": 4, "intermediate": 200}),
    ),
)
'''
_README = """\
# kwdemo

The normalisation, softmax and activation kernels of our serving stack, tracked nightly by
kernelwatch: `kernelwatch check --suite kwdemo --repo .`

## Notes
"""
_TUNING = """\
# Tuning notes

Sweeps we ran and what we kept. Newest last.
"""
_GITIGNORE = "__pycache__/\n"


@dataclass(frozen=True)
class _Chore:
    """An ordinary commit: one line appended to a file no kernel compiles."""

    path: str
    message: str
    line: str


_CHORES = (
    _Chore(
        "README.md",
        "docs: how to check {kernel} on its own",
        "- Check one kernel: `kernelwatch check --suite kwdemo --repo . -k {kernel}`.",
    ),
    _Chore(
        "README.md",
        "docs: note which models {kernel} serves",
        "- {kernel} runs in every {model} decoder layer we serve.",
    ),
    _Chore(
        "README.md",
        "docs: link the {kernel} dashboard",
        "- Nightly {kernel} timings: the kwdemo / {kernel} dashboard in Grafana.",
    ),
    _Chore(
        "TUNING.md",
        "tuning notes: {kernel} warps sweep on {gpu}",
        "- {day}, {gpu}: {kernel} at {warps} warps is within 2% of the best; heuristic kept.",
    ),
    _Chore(
        "TUNING.md",
        "tuning notes: {kernel} block sweep at {model} shapes",
        "- {day}, {gpu}: no block size beats the current one for {kernel} at {model} shapes.",
    ),
    _Chore(
        "TUNING.md",
        "tuning notes: {kernel} is bandwidth-bound on {gpu}",
        "- {day}, {gpu}: {kernel} reaches ~85% of copy bandwidth at {model} prefill.",
    ),
    _Chore(
        "kwdemo/inputs.py",
        "inputs: note where strided rows come from",
        "# {day}: strided rows (row_pad) are slices of {model}'s fused projections.",
    ),
    _Chore(
        "kwdemo/inputs.py",
        "inputs: note the shapes {kernel} is fed in {model}",
        "# {day}: {kernel} sees {model} shapes from decode (1 row) to long prefill.",
    ),
)
_FILL = {
    "kernel": ("rms_norm", "softmax", "silu_and_mul"),
    "model": ("Llama-3-8B", "Llama-3-70B", "Mistral-7B", "Qwen2-7B"),
    "gpu": ("H100", "H200", "B200"),
    "warps": ("4", "8", "16"),
}


class DemoError(ValueError):
    """The demo repository cannot be made; the message is one line."""


@dataclass(frozen=True)
class DemoCommit:
    """One commit of the demo history. ``night`` is its index in ``DemoRepo.nights``."""

    sha: str
    night: int
    when: datetime
    message: str


@dataclass(frozen=True)
class DemoRepo:
    """A made demo repository. ``nights`` holds (day, nightly head SHA) oldest first; the
    first head that contains the culprit is that of the culprit commit's ``night``."""

    path: Path
    suite: str
    nights: tuple[tuple[date, str], ...]
    commits: tuple[DemoCommit, ...]
    culprit: str
    culprit_kernel: str
    culprit_parent: str


@dataclass(frozen=True)
class PlannedCommit:
    """A commit before it is made: the files it writes (path -> whole new text)."""

    night: int
    when: datetime
    message: str
    writes: Mapping[str, str]
    culprit: bool = False


def make_demo_repo(
    path: Path,
    nights: int = 14,
    commits_per_night: int = 3,
    culprit_night: int = 8,
    seed: int = 0,
) -> DemoRepo:
    """Create the demo repository at ``path`` (absent or empty) and return what it holds.

    ``culprit_night`` is a 0-based night index, at least 1 so that a clean nightly head
    precedes the regression; the culprit is commit ``(commits_per_night - 1) // 2`` of that
    night, never its head. ``seed`` picks the ordinary commits. Raises :class:`DemoError`.
    """
    plan = plan_history(
        demo_sources(kernel_source_dir()), nights, commits_per_night, culprit_night, seed
    )
    path = path.resolve()
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise DemoError(f"{path} is in use: the demo repository needs a new or empty directory")
    path.mkdir(parents=True, exist_ok=True)
    _git(path, "init", "-q", "-b", "main")
    commits = []
    for planned in plan:
        for name, text in planned.writes.items():
            (path / name).parent.mkdir(parents=True, exist_ok=True)
            (path / name).write_text(text)
        commits.append(
            DemoCommit(_commit(path, planned), planned.night, planned.when, planned.message)
        )
    culprit = next(i for i, p in enumerate(plan) if p.culprit)
    heads = {c.night: c for c in commits}  # the last commit of a night wins
    return DemoRepo(
        path=path,
        suite=SUITE_MODULE,
        nights=tuple((heads[n].when.date(), heads[n].sha) for n in range(nights)),
        commits=tuple(commits),
        culprit=commits[culprit].sha,
        culprit_kernel=CULPRIT_KERNEL,
        culprit_parent=commits[culprit - 1].sha,
    )


def kernel_source_dir() -> Path:
    """The folder of the installed built-in suite, found without importing it (importing
    would load torch and Triton into this process for nothing)."""
    spec = importlib.util.find_spec(_KERNELS_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DemoError(f"cannot find the {_KERNELS_PACKAGE} package to copy the demo from")
    return Path(next(iter(spec.submodule_search_locations)))


def demo_sources(kernels: Path) -> dict[str, str]:
    """The ``kwdemo`` package made from the built-in kernels in ``kernels``: repository
    path -> text. Raises :class:`DemoError` when a file is missing or no longer has the text
    the copy rewrites."""
    sources = {"kwdemo/__init__.py": _SUITE_INIT}
    for name in _COPIED:
        try:
            text = (kernels / name).read_text()
        except OSError as exc:
            raise DemoError(f"cannot read {kernels / name}: {exc.strerror}") from None
        sources[f"kwdemo/{name}"] = rewrite_imports(text, name) if name in _IMPORTERS else text
    return sources


def rewrite_imports(text: str, name: str) -> str:
    """``text`` of kernel file ``name`` importing its siblings from ``kwdemo``."""
    old, new = f"from {_KERNELS_PACKAGE}.", f"from {SUITE_MODULE}."
    if old not in text:
        raise DemoError(f"kernels/{name} no longer contains {old!r}: update flows/demo_repo.py")
    text = text.replace(old, new)
    if _KERNELS_PACKAGE in text:
        raise DemoError(f"kernels/{name} refers to {_KERNELS_PACKAGE} other than by {old!r}")
    copied = {Path(f).stem for f in _COPIED}
    missing = set(re.findall(rf"from {SUITE_MODULE}\.(\w+)", text)) - copied
    if missing:
        raise DemoError(
            f"kernels/{name} imports {', '.join(sorted(missing))}, which the demo does not "
            "copy: add it to flows/demo_repo.py"
        )
    return text


def plant_regression(text: str) -> str:
    """RMSNorm's source with the chunked sum of squares in place of the one reduction."""
    if text.count(_REDUCTION) != 1:
        raise DemoError(
            f"kernels/rmsnorm.py no longer has exactly one {_REDUCTION.strip()!r} to replace: "
            "update flows/demo_repo.py"
        )
    return text.replace(_REDUCTION, _CHUNKED_REDUCTION)


def plan_history(
    sources: Mapping[str, str],
    nights: int,
    commits_per_night: int,
    culprit_night: int,
    seed: int,
) -> list[PlannedCommit]:
    """Every commit of the history, oldest first: the first imports ``sources``, the
    culprit plants the regression, the others are chores picked by ``seed``."""
    _validate(nights, commits_per_night, culprit_night)
    files = {".gitignore": _GITIGNORE, "README.md": _README, "TUNING.md": _TUNING, **sources}
    rng = random.Random(seed)
    culprit_slot = (commits_per_night - 1) // 2
    plan = []
    for night in range(nights):
        for slot in range(commits_per_night):
            when = FIRST_DAY + timedelta(days=night) + slot * COMMIT_SPACING
            is_culprit = (night, slot) == (culprit_night, culprit_slot)
            if night == slot == 0:
                message, writes = _FIRST_MESSAGE, dict(files)
            elif is_culprit:
                message = _CULPRIT_MESSAGE
                writes = {_CULPRIT_FILE: plant_regression(files[_CULPRIT_FILE])}
            else:
                message, writes = _chore(rng, when, files)
            files.update(writes)
            plan.append(PlannedCommit(night, when, message, writes, is_culprit))
    return plan


def _validate(nights: int, commits_per_night: int, culprit_night: int) -> None:
    if nights < 2:
        raise DemoError(f"nights must be at least 2, got {nights}")
    if not 2 <= commits_per_night <= MAX_COMMITS_PER_NIGHT:
        raise DemoError(
            f"commits_per_night must be 2..{MAX_COMMITS_PER_NIGHT} (the culprit is never a "
            f"night's head), got {commits_per_night}"
        )
    if not 1 <= culprit_night < nights:
        raise DemoError(
            f"culprit_night must be 1..{nights - 1} (a clean night comes first), "
            f"got {culprit_night}"
        )


def _chore(
    rng: random.Random, when: datetime, files: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """A chore whose line its file does not have yet (dated lines never run out)."""
    while True:
        chore = rng.choice(_CHORES)
        fill = {key: rng.choice(values) for key, values in _FILL.items()}
        line = chore.line.format(day=when.date().isoformat(), **fill)
        if line not in files[chore.path]:
            return chore.message.format(**fill), {chore.path: files[chore.path] + line + "\n"}


def _commit(repo: Path, planned: PlannedCommit) -> str:
    stamp = planned.when.isoformat()
    env = {
        "GIT_AUTHOR_NAME": AUTHOR,
        "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
        "GIT_COMMITTER_NAME": AUTHOR,
        "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
        "GIT_AUTHOR_DATE": stamp,
        "GIT_COMMITTER_DATE": stamp,
    }
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", planned.message, env=env)
    return _git(repo, "rev-parse", "HEAD")


def _git(repo: Path, *args: str, env: Mapping[str, str] | None = None) -> str:
    # gitcmd reads neither the user's git configuration nor the repository's hooks, so
    # signing, hooks or templates cannot change the commits: the SHAs are part of what the
    # demo reproduces.
    try:
        return gitcmd.run(repo, *args, env=env).strip()
    except gitcmd.GitError as exc:
        raise DemoError(str(exc)) from None
