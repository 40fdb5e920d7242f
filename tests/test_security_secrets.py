"""No secret in any output: secrets planted in every configurable place (webhook URLs, a
repository source with a token, Grafana and database credentials) appear in nothing the
platform writes (issue 17, finding 8)."""

from __future__ import annotations

import socket

import pytest

from kernelwatch.config.redact import redact, redact_url
from kernelwatch.config.settings import Notifications
from kernelwatch.flows.notify import RegressionNotice, send
from kernelwatch.report.repro import Source, Target, bench_command
from kernelwatch.store.connect import StoreUnavailable, connect

SECRET = "hunter2-s3cret"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_webhook_secret_path_never_reaches_nightly_problems():
    port = _closed_port()
    targets = Notifications(
        webhooks=(f"http://127.0.0.1:{port}/hooks/{SECRET}?token={SECRET}",),
        slack=(f"http://user:{SECRET}@127.0.0.1:{port}/services/T0/B0/{SECRET}",),
    )
    notice = RegressionNotice(1, "demo", "rms_norm slower", 12.0, "a" * 40, "b" * 40, None, None)
    problems = send([notice], targets, timeout_s=2)
    assert len(problems) == 2
    for problem in problems:
        assert SECRET not in problem and "127.0.0.1" in problem


def test_repository_token_is_not_copied_into_report_repro_commands():
    source = Source(f"https://x-access-token:{SECRET}@github.com/org/k.git?auth={SECRET}", "s.py")
    command = bench_command(Target("k", "s", "c" * 40, "rms_norm", "llm", "fp16"), source)
    assert SECRET not in command and "github.com/org/k.git" in command


def test_dashboards_push_errors_do_not_echo_admin_password_urls(kernelwatch_cli):
    url = f"http://admin:{SECRET}@127.0.0.1:{_closed_port()}"
    proc = kernelwatch_cli("dashboards", "push", "--url", url, "--user", "admin",
                           "--password", SECRET)  # fmt: skip
    assert proc.returncode == 1
    assert SECRET not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_database_password_is_not_in_store_errors():
    with pytest.raises(StoreUnavailable) as caught:
        connect(f"postgresql://writer:{SECRET}@127.0.0.1:{_closed_port()}/kw")
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgres://writer:{secret}%PW@127.0.0.1:1/x",  # a password with a bare %
        "postgres://writer:{secret}@[::1:bad/x",  # an IPv6 host missing its bracket
    ],
)
def test_an_unparsable_database_url_is_one_line_without_its_password(kernelwatch_cli, url):
    """psycopg quotes the token it could not parse, the password itself, and its
    ProgrammingError used to escape as a traceback from ``db status`` and every flow."""
    url = url.format(secret=SECRET)
    with pytest.raises(StoreUnavailable) as caught:
        connect(url)
    assert SECRET not in str(caught.value) and "\n" not in str(caught.value)
    proc = kernelwatch_cli("db", "status", env={"KERNELWATCH_DATABASE_URL": url})
    assert proc.returncode != 0
    assert SECRET not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("url", "retried"),
    [
        ("postgres://writer:{secret}%PW@127.0.0.1:1/x", False),  # the configuration's mistake
        ("postgresql://writer:{secret}@127.0.0.1:{port}/kw", True),  # a server that is down
    ],
)
def test_the_flows_retry_a_store_that_is_down_but_not_a_url_that_does_not_parse(url, retried):
    """The nightly with the unparsable URL above spent 40 s in two retries 20 s apart before
    its one line: no retry cures a URL (docs/TESTING.md)."""
    from prefect.states import Failed

    from kernelwatch.flows.tasks import infrastructure_only

    with pytest.raises(StoreUnavailable) as caught:
        connect(url.format(secret=SECRET, port=_closed_port()))
    assert infrastructure_only(None, None, Failed(data=caught.value)) is retried
    assert infrastructure_only(None, None, Failed(data=ValueError("a kernel's"))) is False


def test_redact_takes_user_info_queries_and_webhook_paths():
    assert redact_url(f"https://u:{SECRET}@h.example:8443/a/b?x={SECRET}") == (
        "https://***@h.example:8443/a/b?***"
    )
    assert redact_url(f"https://hooks.slack.com/services/{SECRET}", keep_path=False) == (
        "https://hooks.slack.com/***"
    )
    text = redact(f"failed: <urlopen https://t:{SECRET}@x/y> and {SECRET}", SECRET)
    assert SECRET not in text
