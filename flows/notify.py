"""Announcing new regressions: a JSON webhook and Slack incoming webhooks.

One announcer per regression: when ``[notifications] announcer`` is ``flow`` the nightly
sends these messages the moment it finishes, with the culprit when bisection found one, and
Grafana's rule set has no announcement rule (dashboards/alert_rules.py); when it is
``grafana`` the nightly sends nothing. A target that cannot be reached (each post waits ten
seconds at most) is reported, never fatal: the regression is already stored and on the
dashboards.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from kernelwatch.config.redact import redact, redact_url
from kernelwatch.config.settings import Notifications


@dataclass(frozen=True)
class RegressionNotice:
    """What a message says about one new regression: ``kind`` is timing, correctness or
    static; ``opened_by`` change_point (the history net) or confirmation (the night it
    landed)."""

    regression_id: int
    repository: str
    title: str
    magnitude_pct: float | None
    good: str | None
    bad: str | None
    culprit: str | None
    report: str | None
    kind: str = "timing"
    opened_by: str = "change_point"
    panel_url: str | None = None
    """The kernel history of the worst-moved series, around the change."""
    command: str | None = None
    """The command that measures the culprit again (or bisects the range while none)."""


@dataclass(frozen=True)
class ResolvedNotice:
    """A regression announced by the flow and now resolved (``state``: fixed, wont_fix,
    false_positive, hardware_issue); acknowledging sends nothing."""

    regression_id: int
    repository: str
    title: str
    state: str
    by: str


def send_resolved(
    notice: ResolvedNotice, targets: Notifications, timeout_s: float = 10.0
) -> list[str]:
    """Tell every target that ``notice``'s regression is resolved; one line per failure."""
    problems: list[str] = []
    for url in targets.webhooks:
        body = {"event": "kernelwatch.resolved", "resolved": [asdict(notice)]}
        problems.extend(_post(url, body, timeout_s))
    text = (
        f":white_check_mark: *{notice.repository}* regression #{notice.regression_id} "
        f"resolved as {notice.state} by {notice.by}: {notice.title}"
    )
    for url in targets.slack:
        problems.extend(_post(url, {"text": text}, timeout_s))
    return problems


def bisect_command(regression_id: int, repository: str) -> str:
    """The command that bisects a stored regression's range."""
    return f"kernelwatch bisect --regression {regression_id} --repository {repository}"


def slack_text(notice: RegressionNotice) -> str:
    """One Slack message (mrkdwn) for a regression."""
    size = f" (+{notice.magnitude_pct:.1f}%)" if notice.magnitude_pct is not None else ""
    where = (
        f"culprit `{notice.culprit[:12]}`"
        if notice.culprit
        else f"between `{(notice.good or '?')[:12]}` and `{(notice.bad or '?')[:12]}`"
    )
    report = f"\nreport: {notice.report}" if notice.report else ""
    report += f"\nhistory: {notice.panel_url}" if notice.panel_url else ""
    report += f"\n`{notice.command}`" if notice.command else ""
    kind = "" if notice.kind == "timing" else f" ({notice.kind})"
    return (
        f":rotating_light: *{notice.repository}* regression #{notice.regression_id}{kind}: "
        f"{notice.title}{size}, {where}{report}"
    )


def send(
    notices: Sequence[RegressionNotice], targets: Notifications, timeout_s: float = 10.0
) -> list[str]:
    """Post every notice to every target; returns one line per target that failed."""
    problems: list[str] = []
    if not notices:
        return problems
    for url in targets.webhooks:
        body = {"event": "kernelwatch.regressions", "regressions": [asdict(n) for n in notices]}
        problems.extend(_post(url, body, timeout_s))
    for url in targets.slack:
        for notice in notices:
            problems.extend(_post(url, {"text": slack_text(notice)}, timeout_s))
    return problems


def _post(url: str, body: dict[str, object], timeout_s: float) -> list[str]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            response.read()
    except (urllib.error.URLError, OSError, ValueError) as exc:
        # A webhook's URL is its secret: neither it nor an error quoting it is repeated.
        return [
            f"notification to {redact_url(url, keep_path=False)} failed: {redact(str(exc), url)}"
        ]
    return []
