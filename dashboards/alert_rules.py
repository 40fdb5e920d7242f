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

from kernelwatch.config.settings import LOCAL_POOL, Config, parse
from kernelwatch.dashboards import catalog
from kernelwatch.dashboards.common import FOLDER_TITLE, FOLDER_UID, sql_strings
from kernelwatch.dashboards.limits import NIGHTLY_MISSING_HOURS, UNTRIAGED_DAYS
from kernelwatch.dashboards.sqlquery import DATASOURCE_UID, Sql

GROUP = "kernelwatch"
GROUP_INTERVAL_S = 60
RECEIVER = "kernelwatch"
_EXPR = "__expr__"


@dataclass(frozen=True)
class RuleSpec:
    """One alert rule: its query (rows are instances, one numeric column the value), the
    window the query sees, and when the value fires (``value > above``). ``panel`` names
    the dashboard panel (``uid``, title) a notification links to."""

    uid: str
    title: str
    sql: str
    above: float
    window_s: int
    severity: str
    kind: str
    summary: str
    panel: tuple[str, str] | None = None


@dataclass(frozen=True)
class AlertSettings:
    """What the configuration decides about the rules: who announces regressions (the
    ``kw-regression-open`` rule exists only when Grafana does), the pools whose pipeline is
    watched, and where the runbooks are read."""

    announcer: str
    pools: tuple[str, ...]
    docs_url: str

    @classmethod
    def from_config(cls, config: Config) -> AlertSettings:
        """The settings of ``config`` (its pools, or the local pool when it names none)."""
        return cls(
            config.notifications.announced_by,
            tuple(config.pools) or (LOCAL_POOL,),
            config.notifications.docs_url,
        )


#: A fresh install's settings: what the committed provisioning file is generated with.
DEFAULTS = AlertSettings.from_config(parse({}, None))
#: Severity -> how often Grafana repeats a still-firing notification. Critical is pipeline
#: trouble someone must fix; warning is news; info is a reminder of the triage backlog.
REPEAT = {"critical": "4h", "warning": "24h", "info": "168h"}
#: An open regression is announced once: a long repeat, and no RESOLVED until it is
#: resolved (acknowledging keeps it open).
ANNOUNCEMENT_REPEAT = "720h"


def runbook_url(settings: AlertSettings, uid: str) -> str:
    """The runbook of rule ``uid``: its section of docs/DASHBOARDS.md."""
    return f"{settings.docs_url.rstrip('/')}/DASHBOARDS.md#runbook-{uid}"


def _pools(settings: AlertSettings) -> str:
    return sql_strings(settings.pools)


def rules(settings: AlertSettings = DEFAULTS) -> tuple[RuleSpec, ...]:
    """The alert rules for ``settings``."""
    announce = RuleSpec(
        "kw-regression-open",
        "Open regression",
        """
SELECT regression_id::text AS regression_id, repository, kind, opened_by, title,
  coalesce(kernels, '') AS kernels, coalesce(device_models, '') AS gpus,
  coalesce(to_char(100 * magnitude, 'FMSG990.0') || '%', '') AS magnitude,
  coalesce(left(good_sha, 12) || '..' || left(bad_sha, 12), '') AS range,
  'kernelwatch bisect --regression ' || regression_id || ' --repository ' || repository
    AS command,
  1 AS open
FROM report_triage_board
WHERE open AND kind <> 'serving'
""",
        above=0,
        window_s=600,
        severity="warning",
        kind="regression",
        summary="{{ $labels.kind }} regression #{{ $labels.regression_id }}: "
        "{{ $labels.title }} ({{ $labels.magnitude }}; {{ $labels.kernels }} on "
        "{{ $labels.gpus }}), good..bad {{ $labels.range }}; bisect or see the culprit: "
        "{{ $labels.command }}",
        panel=("kw-triage", "Regressions"),
    )
    return (
        *((announce,) if settings.announcer == "grafana" else ()),
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
            severity="info",
            kind="regression",
            summary="reminder: {{ $labels.title }} has waited {{ humanize $values.B.Value }} "
            "days for triage",
            panel=("kw-triage", "Regressions"),
        ),
        RuleSpec(
            "kw-serving-regression",
            "Serving regression confirmed",
            """
SELECT regression_id::text AS regression_id, deployment, title, metrics,
  to_char(100 * magnitude, 'FMSG990.0') || '%' AS magnitude,
  left(previous_kernel_commit, 12) || '..' || left(kernel_commit, 12) AS kernels,
  'kernelwatch regressions show ' || regression_id AS command,
  coalesce(explanation, 'no trace either side yet: kernelwatch serving ingest --trace')
    AS explanation,
  1 AS open
FROM report_serving_regressions
WHERE open AND NOT provisional
""",
            above=0,
            window_s=600,
            severity="warning",
            kind="regression",
            summary="serving regression #{{ $labels.regression_id }}: {{ $labels.title }} "
            "({{ $labels.magnitude }}), kernels {{ $labels.kernels }}; "
            "{{ $labels.explanation }}; {{ $labels.command }}",
            panel=("kw-serving", "Serving changes"),
        ),
        RuleSpec(
            "kw-run-failed",
            "Nightly run failed",
            f"""
SELECT run_id::text AS run_id, repository, trigger, device_model, host,
  coalesce(pool, '') AS pool, 1 AS failed
FROM report_runs
WHERE status = 'failed' AND trigger = 'nightly' AND pool IN ({_pools(settings)})
  AND $__timeFilter(started_at)
""",
            above=0,
            window_s=86400,
            severity="warning",
            kind="pipeline",
            summary="nightly run {{ $labels.run_id }} failed on {{ $labels.host }} "
            "(pool {{ $labels.pool }})",
            panel=("kw-health", "Failed and partial runs"),
        ),
        RuleSpec(
            "kw-nightly-missing",
            "Nightly data missing",
            f"""
SELECT repository, pool, device_model, hours_since
FROM report_pool_freshness
WHERE pool IN ({_pools(settings)})
""",
            above=NIGHTLY_MISSING_HOURS,
            window_s=600,
            severity="critical",
            kind="pipeline",
            summary="no nightly run of {{ $labels.repository }} on {{ $labels.device_model }} "
            "in pool {{ $labels.pool }} for {{ humanize $values.B.Value }} hours",
            panel=("kw-health", "Failed and partial runs"),
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


def _annotations(spec: RuleSpec, settings: AlertSettings) -> dict[str, str]:
    annotations = {"summary": spec.summary, "runbook_url": runbook_url(settings, spec.uid)}
    if spec.panel is not None:
        # Grafana puts the dashboard's and the panel's URLs into the notification.
        uid, title = spec.panel
        annotations |= {"__dashboardUid__": uid, "__panelId__": str(catalog.panel_id(uid, title))}
    return annotations


def rule(spec: RuleSpec, settings: AlertSettings = DEFAULTS) -> alerting.Rule:
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
        .annotations(_annotations(spec, settings))
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


def rule_group(settings: AlertSettings = DEFAULTS) -> dict[str, Any]:
    """The rule group as ``PUT /api/v1/provisioning/folder/{uid}/rule-groups/{group}``
    takes it: every rule, with its uid, so a second push updates in place."""
    group = (
        alerting.RuleGroup(GROUP)
        .folder_uid(FOLDER_UID)
        .interval(GROUP_INTERVAL_S)
        .rules([rule(spec, settings) for spec in rules(settings)])
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
    """The policy tree: everything to ``kernelwatch``, grouped per rule and repository, and
    routed by severity: an open regression is announced once, critical pipeline trouble
    repeats every 4 hours, news daily, backlog reminders weekly."""
    routes = [
        alerting.NotificationPolicy()
        .receiver(RECEIVER)
        .object_matchers([["kind", "=", "regression"], ["severity", "=", "warning"]])
        .repeat_interval(ANNOUNCEMENT_REPEAT),
        *(
            alerting.NotificationPolicy()
            .receiver(RECEIVER)
            .object_matchers([["severity", "=", severity]])
            .repeat_interval(repeat)
            for severity, repeat in REPEAT.items()
        ),
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


def provisioning_file(settings: AlertSettings = DEFAULTS) -> dict[str, Any]:
    """The alerting provisioning file (``provisioning/alerting/*.json``): the rule group,
    the contact point with every integration taking its target from the environment, and
    the notification policy."""
    group = rule_group(settings)
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
