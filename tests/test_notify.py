"""What an announcement says: the Slack text a person reads for each kind of regression."""

from __future__ import annotations

import dataclasses

import pytest

from kernelwatch.flows.notify import RegressionNotice, bisect_command, slack_text

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
