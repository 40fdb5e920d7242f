"""Grafana-managed alert rules on the store's reporting views, the contact points they notify
(webhook, Slack, email) and the notification policy, as code.

Each rule is an SQL query (refId A) whose rows are alert instances: the string columns
become labels and the one numeric column is the value, which a Reduce (B, last) and a
Threshold (C) turn into firing or not. The objects are built with the SDK and serialised in
the shape of Grafana's provisioning HTTP API (``/api/v1/provisioning/...``);
:func:`provisioning_file` rewrites them in the shape of Grafana's file provisioning.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from grafana_foundation_sdk.builders import alerting, expr
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.alerting import RelativeTimeRange

from kernelwatch.dashboards.common import FOLDER_TITLE, FOLDER_UID
from kernelwatch.dashboards.sqlquery import DATASOURCE_UID, Sql

GROUP = "kernelwatch"
GROUP_INTERVAL_S = 60
RECEIVER = "kernelwatch"
#: A regression untriaged for longer than this escalates.
UNTRIAGED_DAYS = 3
#: A GPU model without a nightly run for longer than this has missing data (a nightly
#: schedule plus two hours of slack).
NIGHTLY_MISSING_HOURS = 26
_EXPR = "__expr__"


@dataclass(frozen=True)
class RuleSpec:
    """One alert rule: its query (rows are instances, one numeric column the value), the
    window the query sees, and when the value fires (``value > above``)."""

    uid: str
    title: str
    sql: str
    above: float
    window_s: int
    severity: str
    kind: str
    summary: str


RULES = (
    RuleSpec(
        "kw-regression-new",
        "New untriaged regression",
        """
SELECT regression_id::text AS regression_id, repository, kind, opened_by, title,
  coalesce(kernels, '') AS kernels, coalesce(device_models, '') AS gpus, 1 AS untriaged
FROM report_triage_board
WHERE state = 'untriaged'
""",
        above=0,
        window_s=600,
        severity="warning",
        kind="regression",
        summary="{{ $labels.kind }} regression: {{ $labels.title }} ({{ $labels.kernels }} "
        "on {{ $labels.gpus }}; opened by {{ $labels.opened_by }})",
    ),
    RuleSpec(
        "kw-regression-stale",
        f"Regression untriaged for more than {UNTRIAGED_DAYS} days",
        """
SELECT regression_id::text AS regression_id, repository, title, age_days
FROM report_triage_board
WHERE state = 'untriaged'
""",
        above=UNTRIAGED_DAYS,
        window_s=600,
        severity="critical",
        kind="regression",
        summary="{{ $labels.title }} has waited {{ humanize $values.B.Value }} days for triage",
    ),
    RuleSpec(
        "kw-run-failed",
        "Run failed",
        """
SELECT run_id::text AS run_id, repository, trigger, device_model, host,
  coalesce(pool, '') AS pool, 1 AS failed
FROM report_runs
WHERE status = 'failed' AND $__timeFilter(started_at)
""",
        above=0,
        window_s=86400,
        severity="warning",
        kind="pipeline",
        summary="{{ $labels.trigger }} run {{ $labels.run_id }} failed on {{ $labels.host }}",
    ),
    RuleSpec(
        "kw-nightly-missing",
        "Nightly data missing",
        """
SELECT repository, device_model, hours_since
FROM report_nightly_freshness
""",
        above=NIGHTLY_MISSING_HOURS,
        window_s=600,
        severity="critical",
        kind="pipeline",
        summary="no nightly run of {{ $labels.repository }} on {{ $labels.device_model }} "
        "for {{ humanize $values.B.Value }} hours",
    ),
)


@dataclass(frozen=True)
class Receivers:
    """Where notifications go; an empty value leaves that integration out. The provisioning
    file refers to environment variables instead (Grafana expands them at start)."""

    webhook_url: str = ""
    slack_url: str = ""
    emails: str = ""


ENVIRONMENT_RECEIVERS = Receivers(
    webhook_url="${KERNELWATCH_ALERT_WEBHOOK_URL}",
    slack_url="${KERNELWATCH_SLACK_WEBHOOK_URL}",
    emails="${KERNELWATCH_ALERT_EMAILS}",
)


def rule(spec: RuleSpec) -> alerting.Rule:
    """The SDK rule for ``spec``: SQL (A), Reduce last (B), Threshold ``B > above`` (C)."""
    return (
        alerting.Rule(spec.title)
        .uid(spec.uid)
        .org_id(1)
        .folder_uid(FOLDER_UID)
        .rule_group(GROUP)
        .condition("C")
        .for_val("0s")
        .no_data_state("OK")
        .exec_err_state("Error")
        .labels({"kind": spec.kind, "severity": spec.severity})
        .annotations({"summary": spec.summary})
        .with_query(
            alerting.Query("A")
            .datasource_uid(DATASOURCE_UID)
            .relative_time_range(RelativeTimeRange(from_val=spec.window_s, to=0))
            .model(Sql(spec.sql))
        )
        .with_query(
            alerting.Query("B")
            .datasource_uid(_EXPR)
            .model(expr.TypeReduce().ref_id("B").expression("A").reducer("last"))
        )
        .with_query(
            alerting.Query("C")
            .datasource_uid(_EXPR)
            .model(
                expr.TypeThreshold()
                .ref_id("C")
                .expression("B")
                .conditions(
                    [
                        expr.ExprTypeThresholdConditions().evaluator(
                            expr.ExprTypeThresholdConditionsEvaluator()
                            .type("gt")
                            .params([float(spec.above)])
                        )
                    ]
                )
            )
        )
    )


def rule_group() -> dict[str, Any]:
    """The rule group as ``PUT /api/v1/provisioning/folder/{uid}/rule-groups/{group}``
    takes it: every rule, with its uid, so a second push updates in place."""
    group = (
        alerting.RuleGroup(GROUP)
        .folder_uid(FOLDER_UID)
        .interval(GROUP_INTERVAL_S)
        .rules([rule(spec) for spec in RULES])
    )
    return _json(group.build())


def contact_points(receivers: Receivers) -> list[dict[str, Any]]:
    """One contact point, ``kernelwatch``, with an integration per configured receiver, as
    ``/api/v1/provisioning/contact-points`` takes them (one object per integration)."""
    integrations = [
        (receivers.webhook_url, "kw-webhook", "webhook",
         {"url": receivers.webhook_url, "httpMethod": "POST"}),
        (receivers.slack_url, "kw-slack", "slack", {"url": receivers.slack_url}),
        (receivers.emails, "kw-email", "email",
         {"addresses": receivers.emails, "singleEmail": True}),
    ]  # fmt: skip
    return [
        _json(alerting.ContactPoint().uid(uid).name(RECEIVER).type(kind).settings(settings).build())
        for target, uid, kind, settings in integrations
        if target
    ]


def notification_policy() -> dict[str, Any]:
    """The policy tree: everything to ``kernelwatch``, grouped per rule and repository;
    pipeline trouble repeats every 4 hours, regressions every day."""
    routes = [
        alerting.NotificationPolicy()
        .receiver(RECEIVER)
        .object_matchers([["kind", "=", kind]])
        .repeat_interval(repeat)
        for kind, repeat in (("pipeline", "4h"), ("regression", "24h"))
    ]
    policy = (
        alerting.NotificationPolicy()
        .receiver(RECEIVER)
        .group_by(["grafana_folder", "alertname", "repository"])
        .group_wait("30s")
        .group_interval("5m")
        .repeat_interval("12h")
        .routes(routes)
    )
    return _json(policy.build())


def provisioning_file() -> dict[str, Any]:
    """The alerting provisioning file (``provisioning/alerting/*.json``): the rule group,
    the contact point with every integration taking its target from the environment, and
    the notification policy."""
    group = rule_group()
    rules = [
        {key: value for key, value in r.items() if key not in ("folderUID", "ruleGroup", "orgID")}
        for r in group["rules"]
    ]
    receivers = [
        {"uid": p["uid"], "type": p["type"], "settings": p["settings"]}
        for p in contact_points(ENVIRONMENT_RECEIVERS)
    ]
    return {
        "apiVersion": 1,
        "groups": [
            {
                "orgId": 1,
                "name": GROUP,
                "folder": FOLDER_TITLE,
                "interval": f"{GROUP_INTERVAL_S}s",
                "rules": rules,
            }
        ],
        "contactPoints": [{"orgId": 1, "name": RECEIVER, "receivers": receivers}],
        "policies": [{"orgId": 1, **notification_policy()}],
    }


def _json(model: object) -> Any:
    return json.loads(json.dumps(model, cls=JSONEncoder))
