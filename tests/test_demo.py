"""The demo repository: its history's shape, and its planted regression as the real tools see
it (build stage, correctness check, timing in the CPU interpreter).

The tool checks run on a three-night history (culprit in night 1); the shape checks on the
default fourteen nights the main job uses. That the culprit is much slower in the
interpreter's CPU time is test_flows.py's confirmed SLOWER verdict on the same demo history
(and the quick demo's alert, below).
"""

from __future__ import annotations

import contextlib
import json
import tomllib
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from gitrepo import git

from kernelwatch.analysis.static_diff import diff_builds
from kernelwatch.cli.demo import demo_config, judge
from kernelwatch.config.settings import parse
from kernelwatch.flows.demo_repo import (
    AUTHOR,
    FIRST_DAY,
    DemoError,
    demo_sources,
    kernel_source_dir,
    make_demo_repo,
    plant_regression,
    rewrite_imports,
)
from kernelwatch.harness.build.stage import BuildRequest, run_build
from kernelwatch.harness.isolation.worktree import checkout
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.store.triage_state import show_regression

#: Everything a kernel of the demo suite compiles or is declared in.
KERNEL_FILES = (
    "kwdemo/__init__.py",
    "kwdemo/rmsnorm.py",
    "kwdemo/softmax.py",
    "kwdemo/activation.py",
)


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    """The main job's history: the defaults."""
    return make_demo_repo(tmp_path_factory.mktemp("full") / "repo")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return make_demo_repo(tmp_path_factory.mktemp("demo") / "repo", nights=3, culprit_night=1)


@pytest.fixture(scope="module")
def trees(demo):
    """Worktrees of the culprit's parent, the culprit and the ordinary commit after it."""
    after = demo.commits[[c.sha for c in demo.commits].index(demo.culprit) + 1].sha
    revs = {"parent": demo.culprit_parent, "culprit": demo.culprit, "after": after}
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(checkout(demo.path, sha)).path for name, sha in revs.items()
        }


@pytest.fixture(scope="module")
def builds(demo, trees, tmp_path_factory):
    """Each tree built once for both targets, in history order, through one cache, with the
    main job's selection (fp32, smoke shapes)."""
    cache = tmp_path_factory.mktemp("build-cache")

    def build(tree: Path):
        request = BuildRequest(
            SuiteRef(demo.suite, str(tree)),
            archs=("sm_90a", "sm_100a"),
            workload="smoke",
            dtypes=("fp32",),
            cache_dir=str(cache),
        )
        return run_build(request).records

    return {name: build(tree) for name, tree in trees.items()}


def test_history_has_one_head_per_night_at_fixed_dates(full):
    repo = full
    assert len(repo.nights) == 14 and len(repo.commits) == 14 * 3
    assert [day for day, _ in repo.nights] == [
        (FIRST_DAY + timedelta(days=n)).date() for n in range(14)
    ]
    assert [sha for _, sha in repo.nights] == [c.sha for c in repo.commits[2::3]]
    assert [c.night for c in repo.commits] == [n for n in range(14) for _ in range(3)]
    log = git(repo.path, "log", "--reverse", "--format=%H|%an|%aI|%cI").splitlines()
    assert log == [
        f"{c.sha}|{AUTHOR}|{c.when.isoformat()}|{c.when.isoformat()}" for c in repo.commits
    ]
    assert git(repo.path, "status", "--porcelain") == ""
    assert repo.suite == "kwdemo" and repo.culprit_kernel == "rms_norm"


def test_culprit_sits_mid_night_and_is_the_only_kernel_change(full):
    repo = full
    shas = [c.sha for c in repo.commits]
    culprit = shas.index(repo.culprit)
    assert culprit == 8 * 3 + 1 and repo.commits[culprit].night == 8
    assert repo.culprit not in {sha for _, sha in repo.nights}
    assert repo.culprit_parent == shas[culprit - 1]
    assert repo.culprit_parent == git(repo.path, "rev-parse", f"{repo.culprit}^")
    assert git(repo.path, "show", "--format=", "--name-only", repo.culprit) == ("kwdemo/rmsnorm.py")
    touching = git(repo.path, "log", "--format=%H", "--", *KERNEL_FILES).splitlines()
    assert touching == [repo.culprit, shas[0]]
    subject = git(repo.path, "log", "-1", "--format=%s", repo.culprit)
    assert subject.startswith("rms_norm: ")


def test_same_arguments_give_the_same_commits(tmp_path):
    first = make_demo_repo(tmp_path / "a", nights=2, culprit_night=1)
    again = make_demo_repo(tmp_path / "b", nights=2, culprit_night=1)
    other = make_demo_repo(tmp_path / "c", nights=2, culprit_night=1, seed=1)
    assert first.commits == again.commits and first.nights == again.nights
    assert first.commits[0] == other.commits[0]  # the kernels as imported: no seed in it
    assert [c.sha for c in first.commits[1:]] != [c.sha for c in other.commits[1:]]


@pytest.mark.parametrize(
    ("nights", "per_night", "culprit_night", "message"),
    [
        (1, 3, 0, "nights must be at least 2"),
        (4, 1, 2, r"commits_per_night must be 2\.\.12"),
        (4, 13, 2, r"commits_per_night must be 2\.\.12"),
        (4, 3, 0, r"culprit_night must be 1\.\.3"),
        (4, 3, 4, r"culprit_night must be 1\.\.3"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    tmp_path, nights, per_night, culprit_night, message
):
    with pytest.raises(DemoError, match=message):
        make_demo_repo(tmp_path / "repo", nights, per_night, culprit_night)
    assert not (tmp_path / "repo").exists()


def test_a_directory_in_use_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(DemoError, match="is in use"):
        make_demo_repo(tmp_path, nights=2, culprit_night=1)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_kernel_sources_that_changed_shape_fail_clearly(tmp_path):
    with pytest.raises(DemoError, match=r"kernels/softmax\.py no longer contains"):
        rewrite_imports("import torch\n", "softmax.py")
    with pytest.raises(DemoError, match="imports tuning, which the demo does not copy"):
        rewrite_imports("from kernelwatch.kernels.tuning import Tunable\n", "softmax.py")
    with pytest.raises(DemoError, match=r"refers to kernelwatch\.kernels other than"):
        rewrite_imports(
            "from kernelwatch.kernels.inputs import randn\nimport kernelwatch.kernels\n", "x.py"
        )
    with pytest.raises(DemoError, match="no longer has exactly one 'mean_sq = "):
        plant_regression("mean_sq = tl.sum(x * x) / n\n")
    with pytest.raises(DemoError, match="cannot read"):
        demo_sources(tmp_path)


def test_sources_are_the_installed_kernels_with_imports_rewritten():
    sources = demo_sources(kernel_source_dir())
    real = (kernel_source_dir() / "rmsnorm.py").read_text()
    assert sources["kwdemo/rmsnorm.py"] == real.replace("from kernelwatch.kernels.", "from kwdemo.")
    assert sources["kwdemo/inputs.py"] == (kernel_source_dir() / "inputs.py").read_text()
    assert "kernelwatch.kernels" not in "".join(sources.values())


def test_build_stage_flags_the_culprit_on_both_targets(builds):
    findings = diff_builds(builds["parent"], builds["culprit"])
    assert {f.kernel for f in findings} == {"rms_norm"}
    assert {(f.rule, f.arch) for f in findings} >= {
        ("instructions", "sm_90a"),
        ("instructions", "sm_100a"),
    }
    rebuilt = {(r.kernel, r.arch) for r in builds["culprit"] if not r.cached}
    assert rebuilt == {("rms_norm", "sm_90a"), ("rms_norm", "sm_100a")}


def test_ordinary_commit_is_not_flagged_and_comes_from_the_cache(builds):
    assert diff_builds(builds["culprit"], builds["after"]) == []
    assert len(builds["after"]) == 6 and all(r.cached for r in builds["after"])


def test_culprit_passes_the_correctness_check(kernelwatch_cli, demo, trees):
    proc = kernelwatch_cli(
        "check", "--suite", demo.suite, "--repo", str(trees["culprit"]), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    verdicts = {
        (r["case"]["kernel"], r["case"]["dtype"]): r["verdict"]
        for r in map(json.loads, proc.stdout.splitlines())
    }
    assert verdicts[("rms_norm", "fp32")] == verdicts[("rms_norm", "fp16")] == "pass"
    assert set(verdicts.values()) <= {"pass", "unsupported"}


@pytest.mark.parametrize(("gpu", "timer"), [(False, "cpu-process-time"), (True, "auto")])
def test_the_demo_times_the_interpreter_in_cpu_time_and_a_gpu_by_its_events(tmp_path, gpu, timer):
    # In the interpreter the planted commit is 3x the work: the child's CPU time shows it
    # whatever else the machine runs, where the wall clock's margin goes to its neighbours.
    text = demo_config(tmp_path / "repo", "kwdemo", tmp_path / "reports", 5, gpu=gpu)
    assert parse(tomllib.loads(text), None).bench.timer == timer


def _regression(number: int, culprit: str | None) -> dict[str, object]:
    return {"regression_id": number, "title": f"regression {number}", "culprit_sha": culprit}


def test_the_demo_finds_the_culprit_only_alone():
    planted = "a" * 40
    assert judge([_regression(1, planted)], planted) == (True, [])
    for extra in (_regression(2, "b" * 40), _regression(2, None), _regression(2, planted)):
        found, others = judge([_regression(1, planted), extra], planted)
        assert not found and others == [
            f"regression #2 'regression 2', culprit {(extra['culprit_sha'] or 'none')[:12]}"
        ]
    found, others = judge([_regression(1, "b" * 40)], planted)
    assert not found and others == ["regression #1 'regression 1', culprit bbbbbbbbbbbb"]
    assert judge([], planted) == (False, [])


def test_the_quick_demo_names_the_culprit_the_night_it_lands(
    kernelwatch_cli, pg_server, tmp_path, monkeypatch
):
    """``kernelwatch demo`` end to end at its smallest (four nights, the culprit's kernel
    only, no build stage), on the session's PostgreSQL: ~45 CPU-seconds."""
    monkeypatch.setenv("KERNELWATCH_PG_DIR", str(pg_server.root))
    proc = kernelwatch_cli("demo", "--dir", str(tmp_path), "--quick", "--nights", "4", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "night 3: regression(s) (1,) opened" in proc.stderr
    assert "alerted 0 nights after it landed; bisection found it" in proc.stderr
    assert "also opened" not in proc.stderr
    # The deployment serving each night's head: the culprit's deploy moves TPOT, one serving
    # regression opens at its first run, and the results say they are simulated.
    assert "serving (simulated): 16 vLLM results of kwdemo-chat over 4 nights" in proc.stderr
    assert "serving: kwdemo-chat: p99_tpot_ms +" in proc.stderr
    (opened,) = [line for line in proc.stderr.splitlines()
                 if line.startswith("serving: regression #")]  # fmt: skip
    regression_id = int(opened.split("#")[1].split()[0])
    with psycopg.connect(pg_server.url("kernelwatch_demo")) as conn:
        detail = show_regression(conn, regression_id)
        heads = [sha for (sha,) in conn.execute(
            "SELECT c.sha FROM runs r JOIN commits c ON c.id = r.commit_id "
            "WHERE r.trigger = 'nightly' ORDER BY r.started_at"
        )]  # fmt: skip
    assert detail["kind"] == "serving" and detail["repository"] == "kwdemo"
    moved = {c["metric"]: c for c in detail["serving_change_list"]}
    assert {"median_tpot_ms", "p99_tpot_ms", "output_throughput"} <= set(moved)
    # At the first run serving night 3's head, the one that carries the culprit.
    assert {c["kernel_commit"] for c in moved.values()} == {heads[2]} == {detail["bad_sha"]}
    assert {c["previous_kernel_commit"] for c in moved.values()} == {heads[1]}
