"""What an announcement says: the Slack text a person reads for each kind of regression."""

from __future__ import annotations

import dataclasses

import pytest

from kernelwatch.config.settings import Notifications
from kernelwatch.flows import notify
from kernelwatch.flows.notify import (
    RegressionNotice,
    ResolvedNotice,
    bisect_command,
    send,
    send_resolved,
    slack_text,
)

NOTICE = RegressionNotice(
    regression_id=7,
    repository="kernels",
    title="gemm fp16 m=4096",
    magnitude_pct=12.34,
    good="a" * 40,
    bad="b" * 40,
    culprit=None,
    report=None,
)


def test_a_timing_regression_between_two_commits_names_the_range():
    assert slack_text(NOTICE) == (
        ":rotating_light: *kernels* regression #7: gemm fp16 m=4096 (+12.3%), "
        "between `aaaaaaaaaaaa` and `bbbbbbbbbbbb`"
    )


def test_a_culprit_and_the_links_are_named_and_other_kinds_say_their_kind():
    notice = dataclasses.replace(
        NOTICE,
        culprit="c" * 40,
        kind="correctness",
        magnitude_pct=None,
        report="https://reports.example/7.html",
        panel_url="https://grafana.example/d/kw",
        command=bisect_command(7, "kernels"),
    )
    assert slack_text(notice) == (
        ":rotating_light: *kernels* regression #7 (correctness): gemm fp16 m=4096, "
        "culprit `cccccccccccc`\n"
        "report: https://reports.example/7.html\n"
        "history: https://grafana.example/d/kw\n"
        "`kernelwatch bisect --regression 7 --repository kernels`"
    )


def test_an_unknown_end_of_the_range_is_a_question_mark():
    notice = dataclasses.replace(NOTICE, good=None)
    assert slack_text(notice).endswith("between `?` and `bbbbbbbbbbbb`")
    assert slack_text(dataclasses.replace(NOTICE, bad=None)).endswith("and `?`")


def test_a_notice_cannot_be_changed_after_it_is_made():
    with pytest.raises(dataclasses.FrozenInstanceError):
        NOTICE.title = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ResolvedNotice(7, "kernels", "t", "fixed", "ana").state = "wont_fix"  # type: ignore[misc]


def test_an_unreachable_target_holds_the_nightly_ten_seconds_at_most(monkeypatch):
    # Announcements go out after the night's results are stored; a target that does not
    # answer holds the run ten seconds a post, no longer (flows/notify.py's module note).
    waits = []

    def urlopen(request, timeout):
        waits.append(timeout)
        raise TimeoutError("timed out")

    monkeypatch.setattr(notify.urllib.request, "urlopen", urlopen)
    targets = Notifications(
        webhooks=("https://hooks.invalid/w",), slack=("https://hooks.invalid/s",)
    )
    resolved = ResolvedNotice(7, "kernels", NOTICE.title, "fixed", "ana")
    problems = send([NOTICE], targets) + send_resolved(resolved, targets)
    assert waits == [10.0] * 4
    assert len(problems) == 4
