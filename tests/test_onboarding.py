"""Issue 18: a kernel repository nobody here wrote, put under kernelwatch as docs/SUITES.md
says — `kernelwatch init`, its todos filled, then `check`, `build-diff` and `pr-check` with
their exit codes — on a `src/` layout with a namespace package, a host wrapper, an in-place
kernel, float arguments and a libdevice call (``kernelrepo.py``).

The repository's history (one module-scoped fixture, shared by every test here):

- ``init``: the kernels, the suite `init` wrote (todos left) and its kernelwatch.toml;
- ``filled``: the suite's todos filled;
- ``fp16_broken``: gelu drops its fp32 upcast, so its fp16 cases error (libdevice tanh has
  no fp16 variant): a failure every later commit keeps;
- ``readme``: a documentation change only;
- ``big_blocks``: gelu launches 16x bigger blocks (a config change a static rule must see).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from gitrepo import git
from kernelrepo import GELU, commit, fill, make_repo

from kernelwatch.harness.suite import SuiteRef, load_suite_isolated

SUITE = "kernelwatch_suite.py"
#: What the docs tell a user to add to the [[repositories]] block init wrote, to make the
#: PR check cheap: two dtypes, one target.
CHEAP = 'dtypes = ["fp32", "fp16"]\narchs = ["sm_90a"]\n'


@dataclass(frozen=True)
class Acme:
    repo: Path
    shas: dict[str, str]
    trees: dict[str, Path]
    init_stdout: str


@pytest.fixture(scope="module")
def acme(tmp_path_factory, kernelwatch_cli) -> Acme:
    root = tmp_path_factory.mktemp("onboarding")
    repo = make_repo(root / "acme-kernels")
    init = kernelwatch_cli("init", cwd=repo)
    assert init.returncode == 0, init.stderr
    config = (repo / "kernelwatch.toml").read_text()
    (repo / "kernelwatch.toml").write_text(
        config.replace('workload = "smoke"\n', 'workload = "smoke"\n' + CHEAP)
        # The child's own CPU time: an unchanged head stays SAME however loaded the cores are.
        + '\n[bench]\ntimer = "cpu-process-time"\nbaseline = false\nbudget_s = 0.3\n'
        + "\n[verdict]\nmargin = 0.5\n"
    )
    shas = {"init": commit(repo, "kernelwatch init")}
    shas["filled"] = commit(repo, "fill the suite", {SUITE: fill((repo / SUITE).read_text())})
    no_upcast = GELU.replace("mask=mask).to(tl.float32)", "mask=mask)")
    shas["fp16_broken"] = commit(repo, "gelu: no upcast", {"src/acme/ops/gelu.py": no_upcast})
    shas["readme"] = commit(repo, "docs", {"README.md": "acme kernels, now documented\n"})
    big = no_upcast.replace("BLOCK_SIZE = 1024", "BLOCK_SIZE = 16384")
    shas["big_blocks"] = commit(repo, "gelu: bigger blocks", {"src/acme/ops/gelu.py": big})
    trees = {}
    for name in ("init", "filled", "fp16_broken"):
        trees[name] = root / f"tree-{name}"
        git(repo, "worktree", "add", "-q", "--detach", str(trees[name]), shas[name])
    return Acme(repo, shas, trees, init.stdout)


def _records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


def test_init_writes_a_suite_whose_todos_report_unsupported(acme, kernelwatch_cli, tmp_path):
    assert f"wrote {SUITE}: 3 specs (add, gelu_tanh, scale)" in acme.init_stdout
    next_commands = [line.strip() for line in acme.init_stdout.splitlines()[-3:]]
    options = f"--suite {SUITE} --repo . --src src"
    assert next_commands == [
        f"kernelwatch check {options}",
        f"kernelwatch build-diff HEAD~1 HEAD {options}",
        "kernelwatch pr-check --base main --head HEAD",
    ]
    written = (acme.trees["init"] / SUITE).read_text()
    assert "call=scale_call," in written and "launch=gelu_tanh_launch," in written
    assert "from acme.ops.scale import _scale_kernel, scale" in written
    assert 'src = "src"' in (acme.repo / "kernelwatch.toml").read_text()
    proc = kernelwatch_cli("check", *options.split(), "--json", cwd=acme.trees["init"])
    assert proc.returncode == 0, proc.stderr
    reasons = {(r["case"]["kernel"], r["verdict"], r["reason"]) for r in _records(proc.stdout)}
    assert ("scale", "unsupported", f"scale: make_inputs is a TODO in {SUITE}") in reasons
    assert {verdict for _, verdict, _ in reasons} == {"unsupported"}
    again = kernelwatch_cli("init", cwd=acme.repo)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"error: {SUITE} exists: pass --force to overwrite it, or --suite NAME for another"
    ]
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    assert kernelwatch_cli("init", cwd=empty).stderr.startswith("error: no @triton.jit function")


def test_check_is_green_after_filling_then_1_on_an_error_and_2_on_bad_input(acme, kernelwatch_cli):
    options = ("--suite", SUITE, "--repo", ".", "--src", "src", "--json")
    filled = kernelwatch_cli("check", *options, cwd=acme.trees["filled"])
    assert filled.returncode == 0, filled.stderr
    records = _records(filled.stdout)
    assert {r["verdict"] for r in records} == {"pass"} and len(records) == 12
    scale = next(r for r in records if r["case"]["kernel"] == "scale")
    # The wrapper's own choice, observed as it launched.
    assert scale["config"] == {"meta": {"BLOCK": 128}, "num_warps": 4, "num_stages": 3}
    source = f"{SUITE} @ {acme.shas['filled'][:12]}"
    assert scale["software"]["suite_source"] == source
    broken = kernelwatch_cli("check", *options, cwd=acme.trees["fp16_broken"])
    assert broken.returncode == 1
    errors = {(r["case"]["kernel"], r["case"]["dtype"]) for r in _records(broken.stdout)
              if r["verdict"] == "error"}  # fmt: skip
    assert errors == {("gelu_tanh", "fp16")}
    bad = kernelwatch_cli("check", *options[:-1], "--workload", "nope", cwd=acme.trees["filled"])
    assert bad.returncode == 2 and "unknown workload 'nope'" in bad.stderr


def test_build_diff_from_a_source_root_flags_a_config_change(acme, kernelwatch_cli):
    """`--repo checkout/src` is the src/ layout's source root inside the repository; the
    suite file at the repository's top is found from the current directory."""
    options = ("--suite", SUITE, "--repo", "src", "--arch", "sm_90a", "-k", "gelu_tanh")
    options += ("--workers", "1")
    bigger = kernelwatch_cli(
        "build-diff", acme.shas["readme"], acme.shas["big_blocks"], *options, "--dtype", "fp32",
        "--json", cwd=acme.repo,
    )  # fmt: skip
    assert bigger.returncode == 1, bigger.stderr
    findings = _records(bigger.stdout)
    assert {f["rule"] for f in findings} >= {"instructions"}
    assert all(f["config"] == "BLOCK=16384,w4,s3" for f in findings)
    assert "(config BLOCK=1024,w4,s3 -> BLOCK=16384,w4,s3)" in findings[0]["message"]
    unchanged = (acme.shas["fp16_broken"], acme.shas["readme"])
    same = kernelwatch_cli("build-diff", *unchanged, *options, cwd=acme.repo)
    assert same.returncode == 0, same.stderr
    bad = kernelwatch_cli("build-diff", "nope", acme.shas["readme"], *options, cwd=acme.repo)
    assert bad.returncode == 2 and "unknown revision 'nope'" in bad.stderr
    # A build that fails says why, not only where (Triton's first line is `at 6:25:`).
    fp16 = kernelwatch_cli(
        "build", "--rev", acme.shas["fp16_broken"], *options, "--dtype", "fp16", "--json",
        cwd=acme.repo,
    )  # fmt: skip
    assert fp16.returncode == 1
    (reason,) = {r["reason"] for r in _records(fp16.stdout)}
    assert reason.startswith("does not compile for sm_90a: KeyError: (triton.language.float16")
    assert reason.endswith("(line 6:25 of _gelu_tanh_kernel)")


def test_an_entry_point_is_built_with_each_targets_own_choices(acme, kernelwatch_cli):
    proc = kernelwatch_cli(
        "build", "--suite", SUITE, "--repo", ".", "--src", "src", "-k", "scale", "--dtype",
        "fp32", "--arch", "sm_90a,sm_100a", "--workers", "1", "--json", cwd=acme.trees["filled"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warps = {(r["arch"], r["case"], r["config"]["num_warps"]) for r in _records(proc.stdout)}
    # The wrapper gives Blackwell twice the warps (torch.cuda.get_device_capability).
    assert warps == {
        ("sm_90a", "n=1", 4), ("sm_100a", "n=1", 8), ("sm_90a", "n=333", 4),
        ("sm_100a", "n=333", 8),
    }  # fmt: skip


def test_pr_check_exit_codes(acme, kernelwatch_cli, store_url, tmp_path, prefect_api):
    env = {
        "KERNELWATCH_DATABASE_URL": store_url,
        "KERNELWATCH_SPOOL_DIR": str(tmp_path / "spool"),
        **prefect_api,
    }
    sha = acme.shas

    def pr_check(base: str, head: str) -> subprocess.CompletedProcess:
        return kernelwatch_cli("pr-check", "--base", base, "--head", head, cwd=acme.repo, env=env)

    def comment(proc: subprocess.CompletedProcess) -> str:
        files = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
        return (acme.repo / files["comment"]).read_text()

    # The base already errors on gelu's fp16 cases: the head is not blamed for them.
    same = pr_check(sha["fp16_broken"], sha["readme"])
    assert same.returncode == 0, same.stderr[-3000:]
    text = comment(same)
    assert "Already failing at base (not counted)" in text and "gelu_tanh" in text
    # A config change in a kernel one of whose dtypes errors is still built and compared.
    bigger = pr_check(sha["readme"], sha["big_blocks"])
    assert bigger.returncode == 1, bigger.stderr[-3000:]
    text = comment(bigger)
    assert (
        "static regressions" in text and "| gelu_tanh | _gelu_tanh_kernel | sm_90a | fp32 |" in text
    )
    assert "(config BLOCK=1024,w4,s3 -> BLOCK=16384,w4,s3)`" in text  # in a code span
    assert "Correctness failures at head" not in text
    bad = pr_check("nope", sha["readme"])
    assert bad.returncode == 2 and bad.stderr.strip().startswith("error: unknown revision")


def test_two_checkouts_of_a_namespace_package_load_side_by_side(acme, device):
    """Issue 18: forgetting the first checkout read a namespace package's __path__ after
    its parent was gone (KeyError: 'acme.ops')."""
    import torch

    sides = [
        load_suite_isolated(SuiteRef(SUITE, str(acme.trees[name]), "src")).suite
        for name in ("filled", "fp16_broken")
    ]
    x = torch.randn(64, dtype=torch.float16)
    outcomes = []
    for suite in sides:
        gelu = suite.kernel("gelu_tanh")
        try:
            gelu.launch({"x": x}, {"out": torch.empty_like(x)}, {"n": 64}, None)
            outcomes.append("ok")
        except Exception as exc:  # the fp16-broken side's own kernel, as imported
            outcomes.append(type(exc).__name__)
    assert outcomes == ["ok", "InterpreterError"]
    assert not any(name.split(".")[0] == "acme" for name in sys.modules)


def test_only_a_kernel_whose_host_code_crashed_or_hung_is_left_unbuilt(make_correctness):
    """Issue 18: one errored dtype left the whole kernel unbuilt (its planted spill vanished
    from the PR comment). A case that raised costs only its own build; a case the check's
    process died or hung in still keeps the kernel out of the build, whose recording would
    run that host code again."""
    from factories import CASE

    from kernelwatch.flows.pipeline import buildable_kernels

    def case(kernel: str, dtype: str):
        return replace(CASE, kernel=kernel, dtype=dtype)

    checks = [
        make_correctness(case("gelu", "fp32")),
        make_correctness(case("gelu", "fp16"), "error", reason="KeyError: (fp16,)"),
        make_correctness(case("crashes", "fp32"), "error", reason="died of signal SIGSEGV"),
        make_correctness(case("hangs", "fp32"), "error", reason="timed out after 8 s (hung?)"),
        make_correctness(case("wrong", "fp32"), "fail", reason="relative error 1"),
    ]
    assert buildable_kernels(checks) == ("gelu", "wrong")


def test_a_suite_configured_by_its_absolute_path_is_each_revisions_own(acme):
    """Issue 18: `suite = "<checkout>/suite.py"` imported the main checkout's suite for every
    revision, so nightlies, PR checks and bisections measured today's kernels whatever
    revision they named. Here the main checkout's suite is filled, the `init` revision's is
    all todos: checking the `init` revision must give its todos, and say so."""
    from kernelwatch.config.settings import RepositoryConfig
    from kernelwatch.flows.pipeline import check_stage

    repo = RepositoryConfig(
        name="acme",
        source=str(acme.repo),
        suite=str(acme.repo / SUITE),
        src="src",
        kernels=("scale",),
        dtypes=("fp32",),
    )
    records = check_stage(repo, acme.trees["init"], case_timeout_s=120)
    assert {r.verdict for r in records} == {"unsupported"}
    sources = {r.software.suite_source for r in records}
    assert sources == {f"{SUITE} @ {acme.shas['init'][:12]}"}


REGISTERING_SUITE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig, Suite

    # Registered at import, as many kernel libraries do: a second checkout of the same
    # library cannot be imported beside the first.
    torch.library.define("kwreg::double", "(Tensor x) -> Tensor")


    @triton.jit
    def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, 2 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


    def launch(t, o, p, cfg):
        double_kernel[(1,)](t["x"], o["y"], p["n"], BLOCK=16)
        return LaunchConfig({"BLOCK": 16}, num_warps=1, num_stages=1)


    SUITE = Suite(name="kwreg", kernels=(KernelSpec(
        name="double",
        summary="y = 2x",
        make_inputs=lambda p, dtype, dev, gen: {"x": torch.randn(p["n"], generator=gen).to(dtype)},
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": 2 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2 * t["x"]}),
        workloads={"smoke": ({"n": 9},)},
        flops=lambda p: p["n"],
        min_bytes=lambda p, e: 2 * e * p["n"],
        dtypes=("fp32",),
    ),))
    """
)


def test_a_library_that_registers_at_import_is_compared_side_by_side(
    tmp_path, prefect_harness, store_url, monkeypatch
):
    """Issue 18: with both commits imported into one A/B child, a library that registers an
    operator at import could not be imported twice, and the check could only be an error.
    Each side is a process of its own now (issue 29), so both import it and are compared;
    a side that cannot import its suite is still one line naming it (test_ab_runner.py)."""
    from kernelwatch.flows.prcheck import pr_check

    repo = tmp_path / "kwreg"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, "double", {SUITE: REGISTERING_SUITE})
    head = commit(repo, "docs", {"README.md": "doubles\n"})
    config = tmp_path / "kernelwatch.toml"
    config.write_text(
        f'[[repositories]]\nname = "kwreg"\nsource = "{repo}"\nsuite = "{SUITE}"\n'
        f'archs = []\n\n[run]\nreport_dir = "{tmp_path / "reports"}"\n'
        # Timed as the other flow tests time (the child's CPU time, a 50% margin): identical
        # code is SAME, where the 1% default on this CPU left it inconclusive (outcome 3).
        '\n[bench]\ntimer = "cpu-process-time"\nbaseline = false\nbudget_s = 0.3\n'
        "\n[verdict]\nmargin = 0.5\n"
    )
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    summary = pr_check(base=base, head=head)
    assert summary.error is None and summary.outcome == 0, summary.error
    assert "1 cases compared" in Path(summary.comment).read_text()
