"""The Prefect flows end to end on the CPU: Prefect's test harness, a real PostgreSQL, real
git histories, real Triton kernels in the interpreter.

- nightly over a history with a planted regression finds it, and the bisection it starts
  names the planted commit;
- pr_check says 1 on a regressing head and 0 on an unchanged one;
- a commit whose kernels crash, hang or return NaN leaves a completed run with those kernels
  failed and every other result stored.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from gitrepo import repository_of

from kernelwatch.flows.bisection import bisect
from kernelwatch.flows.demo_repo import make_demo_repo
from kernelwatch.flows.nightly import nightly
from kernelwatch.flows.prcheck import pr_check

pytestmark = pytest.mark.usefixtures("prefect_harness")

NIGHTS = 22
CULPRIT_NIGHT = 12


def _config(
    repo: Path, suite: str, kernels: list[str], reports: Path, archs: str = "sm_90a"
) -> str:
    names = ", ".join(f'"{k}"' for k in kernels)
    return f"""
[[repositories]]
name = "demo"
source = "{repo}"
suite = "{suite}"
workload = "smoke"
dtypes = ["fp32"]
kernels = [{names}]
archs = [{", ".join(f'"{a}"' for a in archs.split())}]

[bench]
baseline = false
budget_s = 0.3

# 22 nights cannot reach the fleet's default alpha (a rank test on 12 vs 10 points bottoms out
# near 1e-4); docs/FLOWS.md gives the short-history settings' miss and false-alarm rates.
[detection]
alpha = 1e-3

[verdict]
margin = 0.1

[bisect]
budget_s = 60

[run]
case_timeout_s = 60
report_dir = "{reports}"
"""


@pytest.fixture(scope="module")
def database(pg_server):
    """One database for the module: the nightly history accumulates across its tests."""
    name = "t_flows"
    with psycopg.connect(pg_server.url("postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE kernelwatch')
    return pg_server.url(name)


@pytest.fixture(scope="module")
def demo(tmp_path_factory, database):
    """A demo history (two commits a night; the culprit is the first of its night) and two
    configurations timing only the kernel the culprit slows down: the nightly one skips
    the build stage (22 nights of it would only cost time), the PR one builds for sm_90a."""
    root = tmp_path_factory.mktemp("demo")
    made = make_demo_repo(
        root / "repo", nights=NIGHTS, commits_per_night=2, culprit_night=CULPRIT_NIGHT
    )
    nightly_config, pr_config = root / "nightly.toml", root / "pr.toml"
    kernels = [made.culprit_kernel]
    nightly_config.write_text(_config(made.path, made.suite, kernels, root / "reports", ""))
    pr_config.write_text(_config(made.path, made.suite, kernels, root / "reports"))
    return made, nightly_config, pr_config


@pytest.fixture
def environment(monkeypatch, tmp_path_factory, database):
    cache = tmp_path_factory.getbasetemp() / "build-cache"
    monkeypatch.setenv("KERNELWATCH_BUILD_CACHE", str(cache))
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", database)
    monkeypatch.setenv("KERNELWATCH_SPOOL_DIR", str(tmp_path_factory.getbasetemp() / "spool"))

    def use(config: Path) -> None:
        monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))

    return use


def test_nightly_finds_the_planted_regression_and_bisection_names_the_commit(
    demo, environment, database
):
    made, config, _ = demo
    environment(config)
    summaries = [nightly(repository="demo", rev=sha) for _, sha in made.nights]
    assert all(s.commit.status == "ok" for s in summaries), [s.commit for s in summaries]
    opened = [(i, s.opened) for i, s in enumerate(summaries) if s.opened]
    assert len(opened) == 1 and len(opened[0][1]) == 1, opened
    night, (regression_id,) = opened[0]
    assert night >= CULPRIT_NIGHT
    (bisection,) = summaries[night].bisections
    assert bisection.regression_id == regression_id
    assert bisection.status == "found" and bisection.culprit == made.culprit, bisection
    with psycopg.connect(database) as conn:
        good, bad, culprit = conn.execute(
            "SELECT good_sha, bad_sha, culprit_sha FROM report_regressions "
            "WHERE regression_id = %s",
            (regression_id,),
        ).fetchone()
        steps = conn.execute(
            "SELECT count(*), count(DISTINCT probe_commit_id) FROM bisect_steps "
            "WHERE regression_id = %s",
            (regression_id,),
        ).fetchone()
        triggers = dict(conn.execute("SELECT trigger, count(*) FROM runs GROUP BY 1").fetchall())
    assert culprit == made.culprit
    order = [c.sha for c in made.commits]
    assert order.index(good) < order.index(made.culprit) <= order.index(bad)
    assert steps[0] >= 2 and steps[1] >= 2  # the range's end re-verified, then the middle
    assert triggers["nightly"] == NIGHTS and triggers["bisect"] >= 4
    assert summaries[night].report is not None and Path(summaries[night].report).is_file()
    assert made.culprit[:12] in summaries[night].markdown()


def test_bisect_by_hand_without_a_regression(demo, environment):
    made, config, _ = demo
    environment(config)
    found = bisect(repository="demo", good=made.nights[0][1], bad=made.culprit)
    assert found.status == "found" and found.culprit == made.culprit
    assert found.regression_id is None


def test_pr_check_says_1_for_a_regressing_head_and_0_for_an_unchanged_one(
    demo, environment, tmp_path
):
    made, _, config = demo
    environment(config)
    slower = pr_check(base=made.culprit_parent, head=made.culprit, out_dir=str(tmp_path / "slower"))
    assert slower.outcome == 1, slower
    comment = Path(slower.comment).read_text()
    assert made.culprit_kernel in comment and "SLOWER" in comment.upper()
    assert Path(slower.report).is_file()
    same = pr_check(base=made.nights[0][1], head=made.nights[1][1], out_dir=str(tmp_path / "same"))
    assert same.outcome == 0, same


def test_crashing_hanging_and_nan_kernels_fail_alone(
    tmp_path, environment, database, planted_suite_path
):
    repo = tmp_path / "broken"
    repository_of(repo, {"suite.py": planted_suite_path}, "planted faults")
    config = tmp_path / "kernelwatch.toml"
    config.write_text(
        _config(repo, "suite.py", ["good", "nan_output", "segfault", "hangs"], tmp_path)
        .replace('name = "demo"', 'name = "broken"')
        .replace("case_timeout_s = 60", "case_timeout_s = 8")
    )
    environment(config)
    summary = nightly(repository="broken")
    outcome = summary.commit
    assert outcome.status == "partial" and outcome.run_id is not None
    assert set(outcome.failed) == {"nan_output", "segfault", "hangs"}, outcome.failed
    with psycopg.connect(database) as conn:
        checks = dict(
            conn.execute(
                "SELECT k.name, c.verdict FROM correctness_results c "
                "JOIN runs r ON r.id = c.run_id JOIN kernels k ON k.id = c.kernel_id "
                "WHERE r.run_id = %s",
                (outcome.run_id,),
            ).fetchall()
        )
        timed = conn.execute(
            "SELECT k.name, m.status FROM measurements m JOIN runs r ON r.id = m.run_id "
            "JOIN series s ON s.id = m.series_id JOIN kernels k ON k.id = s.kernel_id "
            "WHERE r.run_id = %s",
            (outcome.run_id,),
        ).fetchall()
        status = conn.execute(
            "SELECT status FROM runs WHERE run_id = %s", (outcome.run_id,)
        ).fetchone()
    assert checks == {
        "good": "pass",
        "nan_output": "fail",
        "segfault": "error",
        "hangs": "error",
    }
    assert timed == [("good", "ok")]  # only what passed is timed
    assert status == ("partial",)


def test_a_bisection_that_cannot_run_is_reported_and_the_night_still_ends(
    tmp_path, environment, planted_suite_path, monkeypatch
):
    from prefect import flow, task

    import kernelwatch.flows.nightly as nightly_module
    from kernelwatch.flows.detection import PassReport
    from kernelwatch.harness.worktree import RevisionError

    @task
    def detect_opens_one(repository, config):
        return PassReport(series=1, too_short=0, change_points=1, opened=(42,), closed=())

    @flow(name="bisect")
    def bisect_of_a_rewritten_range(**parameters):
        raise RevisionError("2e2d9f2a is not an ancestor of c4e44d5a")

    monkeypatch.setattr(nightly_module.tasks, "detect", detect_opens_one)
    monkeypatch.setattr(nightly_module, "bisect", bisect_of_a_rewritten_range)
    monkeypatch.setattr(nightly_module, "regression_notices", lambda ids, report: [])
    repo = tmp_path / "kernels"
    repository_of(repo, {"suite.py": planted_suite_path}, "one good kernel")
    config = tmp_path / "kernelwatch.toml"
    config.write_text(
        _config(repo, "suite.py", ["good"], tmp_path / "reports", "").replace(
            'name = "demo"', 'name = "rewritten"'
        )
    )
    environment(config)
    summary = nightly(repository="rewritten")
    assert summary.commit.status == "ok" and summary.opened == (42,)
    assert summary.bisections == ()
    (problem,) = summary.problems
    assert problem.startswith("bisection of regression #42 failed:")
    assert "not an ancestor" in problem
    assert summary.report is not None and Path(summary.report).is_file()
