"""The local-mode commands (`kernelwatch nightly | pr-check | bisect | deploy`) as a person
runs them, and the notifications the nightly sends."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from webhooks import webhook_recorder

from kernelwatch.config.settings import Notifications
from kernelwatch.flows.demo_repo import make_demo_repo
from kernelwatch.flows.notify import RegressionNotice, send, slack_text

NOTICE = RegressionNotice(
    regression_id=7,
    repository="serving",
    title="rms_norm: +220.0% (1 series)",
    magnitude_pct=220.0,
    good="a" * 40,
    bad="b" * 40,
    culprit="c" * 40,
    report="reports/nightly-serving.html",
)


@pytest.fixture
def recorder():
    """A local webhook that records every POST body: its base URL and what it received."""
    with webhook_recorder() as recorded:
        yield recorded


def test_notifications_reach_webhooks_and_slack(recorder):
    url, received = recorder
    problems = send([NOTICE], Notifications(webhooks=(f"{url}/hook",), slack=(f"{url}/slack",)))
    assert problems == []
    (hook_path, hook), (slack_path, slack) = received
    assert hook_path == "/hook" and hook["event"] == "kernelwatch.regressions"
    assert hook["regressions"][0]["culprit"] == "c" * 40
    assert slack_path == "/slack" and slack == {"text": slack_text(NOTICE)}
    assert "culprit `cccccccccccc`" in slack["text"] and "+220.0%" in slack["text"]


def test_an_unreachable_target_is_reported_not_fatal(recorder):
    url, received = recorder
    dead = "http://127.0.0.1:9/hook"  # discard port: nothing listens
    problems = send([NOTICE], Notifications(webhooks=(dead, f"{url}/ok")))
    # The webhook's path may be its secret: the problem names the host, not the path.
    assert len(problems) == 1 and problems[0].startswith(
        "notification to http://127.0.0.1:9/*** failed"
    )
    assert [path for path, _ in received] == ["/ok"]
    assert send([], Notifications(webhooks=(dead,))) == []


@pytest.fixture
def demo_repo(tmp_path_factory):
    return make_demo_repo(tmp_path_factory.mktemp("cli") / "repo", nights=2, culprit_night=1)


def _config(path: Path, repo: Path, reports: Path) -> Path:
    path.write_text(
        f"""
[[repositories]]
name = "demo"
source = "{repo}"
suite = "kwdemo"
kernels = ["rms_norm"]
dtypes = ["fp32"]
archs = ["sm_90a"]

# The child's own CPU time: the planted ~3x holds however loaded the cores are.
[bench]
timer = "cpu-process-time"
baseline = false
budget_s = 0.3

[verdict]
margin = 0.1

[run]
report_dir = "{reports}"
"""
    )
    return path


#: The ``kernelwatch`` console script's own code (``main()`` of ``kernelwatch.cli.main``), which
#: prints at exit whether Prefect was imported.
ENTRY_POINT_REPORTING_PREFECT = """
import atexit, sys
atexit.register(lambda: print("prefect imported:", "prefect" in sys.modules))
from kernelwatch.cli.main import main
sys.argv = ["kernelwatch", *sys.argv[1:]]
main()
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nightly", "--pool", "gpu-x"], "no pool 'gpu-x'"),
        (["nightly", "--repository", "other"], "no repository 'other'"),
        (["nightly", "--rev", "nope"], "unknown revision 'nope'"),
        (["pr-check", "--base", "nope", "--head", "main"], "unknown revision 'nope'"),
        (["bisect", "--good", "main"], "pass --good REV and --bad REV, or --regression ID"),
        (["deploy"], "no [pools] configured"),
    ],
)
def test_bad_input_exits_2_with_one_line_before_prefect_starts(
    tmp_path, demo_repo, monkeypatch, args, message
):
    """Before Prefect is even imported (1.5 s of CPU, with the flows' own imports 2 s more):
    the console script's entry point, run by a wrapper that says at exit whether it was."""
    config = _config(tmp_path / "kernelwatch.toml", demo_repo.path, tmp_path)
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY_POINT_REPORTING_PREFECT, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200"},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert proc.stdout == "prefect imported: False\n"


@pytest.mark.parametrize("command", [["nightly"], ["demo", "--quick"]])
def test_a_home_prefect_cannot_write_is_one_line_before_prefect_starts(
    tmp_path, demo_repo, command
):
    """A container run as a user with no account may have a HOME that does not exist (or
    `/`): Prefect's local API could not make its database there, and used to wait out its
    120 s start-up timeout, then print a page of tracebacks."""
    config = _config(tmp_path / "kernelwatch.toml", demo_repo.path, tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    missing = tmp_path / "no-such-home"
    proc = subprocess.run(
        [sys.executable, "-c", ENTRY_POINT_REPORTING_PREFECT, *command],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "HOME": str(missing), "KERNELWATCH_CONFIG": str(config), "COLUMNS": "200"},
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == [
        f"error: Prefect's local API keeps its database in {missing / '.prefect'}, which cannot "
        "be written here: set PREFECT_HOME to a writable directory, or PREFECT_API_URL to a "
        "Prefect server"
    ]
    assert proc.stdout == "prefect imported: False\n"
    assert not missing.exists()


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv"
)
@pytest.mark.parametrize("command", ["pr-check", "nightly"])
def test_a_refusal_for_want_of_isolation_is_one_line_and_exit_2(
    tmp_path, demo_repo, monkeypatch, command
):
    """Issue 46: as the runner's container is (root without CAP_SYS_ADMIN, so no namespace
    can be made) and with no runner configured, kernel code is refused. That used to come
    after 92 lines of Prefect's task-failure logs and tracebacks: now it is the refusal's one
    line, before Prefect starts, and exit 2."""
    config = _config(tmp_path / "kernelwatch.toml", demo_repo.path, tmp_path)
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.delenv("KERNELWATCH_RUNNER_DIR", raising=False)
    revisions = (
        ["--base", demo_repo.culprit_parent, "--head", demo_repo.culprit]
        if command == "pr-check"
        else ["--rev", demo_repo.culprit]
    )
    exe = Path(sys.executable).with_name("kernelwatch")
    proc = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-sys_admin", "--", str(exe), command,
         *revisions],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "COLUMNS": "100"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) <= 2, lines
    assert lines[-1].startswith("error: untrusted kernel code is refused here"), lines
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.parametrize(("command", "code"), [("pr-check", 2), ("nightly", 1)])
def test_a_repository_git_cannot_reach_is_one_line_and_never_a_pr_checks_regression_code(
    kernelwatch_cli, tmp_path, monkeypatch, command, code
):
    # pr-check's 1 means "regression": an infrastructure failure there must read as "could not
    # check" (2), where the nightly keeps 1 for it.
    gone = f"file://{tmp_path / 'gone'}"  # a URL: cloned, and the clone fails
    config = _config(tmp_path / "kernelwatch.toml", gone, tmp_path)  # type: ignore[arg-type]
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    revisions = ["--base", "main", "--head", "main"] if command == "pr-check" else ["--rev", "main"]
    proc = kernelwatch_cli(command, *revisions)
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: git "), lines


def test_a_missing_configuration_file_is_named(kernelwatch_cli, tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(tmp_path / "absent.toml"))
    proc = kernelwatch_cli("nightly")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: {tmp_path / 'absent.toml'}: no such configuration file"


def test_pr_check_refuses_case_parameters_that_pin_nothing_in_one_line(
    kernelwatch_cli, tmp_path, demo_repo, store_url, monkeypatch, prefect_api
):
    config = _config(tmp_path / "kernelwatch.toml", demo_repo.path, tmp_path / "reports")
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    base = ("pr-check", "--base", demo_repo.culprit_parent, "--head", demo_repo.culprit)
    malformed = kernelwatch_cli(*base, "--param", "tokens", env=prefect_api)
    assert malformed.returncode == 2
    assert malformed.stderr.strip() == (
        "error: case parameter 'tokens' is not KEY=VALUE (e.g. m=4096)"
    )
    absent = kernelwatch_cli(*base, "--param", "tokens=999", env=prefect_api)
    assert absent.returncode == 2, absent.stderr[-3000:]
    (line,) = [x for x in absent.stderr.splitlines() if x.startswith("error:")]
    assert "no 'smoke' case has tokens=999; cases: tokens=4 hidden=200" in line
    with psycopg.connect(store_url) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)


def test_pr_check_command_exits_1_on_the_planted_regression_and_prints_its_files(
    kernelwatch_cli, tmp_path, demo_repo, store_url, monkeypatch, prefect_api
):
    config = _config(tmp_path / "kernelwatch.toml", demo_repo.path, tmp_path / "reports")
    monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", store_url)
    # As a regression's repro command runs it: its one case pinned.
    proc = kernelwatch_cli(
        "pr-check", "--base", demo_repo.culprit_parent, "--head", demo_repo.culprit,
        "--pr", "17", "--branch", "faster-norm", "--author", "mallory",
        "--kernel", demo_repo.culprit_kernel, "--workload", "smoke", "--dtype", "fp32",
        "--param", "hidden=200", "--param", "tokens=4", env=prefect_api,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    with psycopg.connect(store_url) as conn:
        timed = conn.execute(
            "SELECT DISTINCT kernel, dtype FROM report_pr_findings WHERE kind = 'timing'"
        ).fetchall()
    assert timed == [(demo_repo.culprit_kernel, "fp32")]
    # The PR dashboard's row: the pull request, the comment's verdict, and no report URL
    # where none is configured (a path on the worker is not a link).
    with psycopg.connect(store_url) as conn:
        (check,) = conn.execute(
            "SELECT pr, branch, author, outcome, merge_verdict, report_url, head_sha "
            "FROM report_pr_checks"
        ).fetchall()
    assert check[:4] == ("#17", "faster-norm", "mallory", 1)
    assert check[4].startswith("1 case slower") and check[5] is None
    assert check[6] == demo_repo.culprit
    files = dict(line.split(": ", 1) for line in proc.stdout.strip().splitlines())
    assert {"comment", "report"} <= files.keys(), (proc.stdout, proc.stderr[-3000:])
    comment, report = Path(files["comment"]), Path(files["report"])
    assert comment.is_file() and report.is_file()
    text = comment.read_text()
    assert demo_repo.culprit_kernel in text and "SLOWER" in text.upper()
    # The comment is posted on GitHub: a path on this worker means nothing there (and says
    # where the worker keeps its files). Without a report_url it names the command instead.
    assert str(tmp_path) not in text and str(report) not in text
    assert "kernelwatch report --compare" in text
    assert f"{demo_repo.culprit[:12]} vs {demo_repo.culprit_parent[:12]}: regression" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_pr_check_s_last_line_names_every_outcome_and_2_is_never_no_regression():
    """The exit status is the comparison's outcome; its line used to say "no regression"
    for anything but 1, the check that could not be made included."""
    from typing import get_args

    from kernelwatch.cli.pr_check import VERDICTS
    from kernelwatch.report.compare import Outcome

    assert set(VERDICTS) == set(get_args(Outcome))
    assert "regression" not in VERDICTS[2] and VERDICTS[0] == "no regression"
