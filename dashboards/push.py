"""Push the dashboards and alerting to a running Grafana through its HTTP API (grafana-client):
every object is upserted by uid, so pushing twice leaves one of each.

Order: the folder, the data source (when given), the dashboards (``overwrite``), the rule
group (one PUT carries every rule by uid), the contact points (PUT when the uid exists,
else POST) and, when any contact point was pushed, the notification policy tree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from grafana_client import GrafanaApi
from grafana_client.client import GrafanaClientError, GrafanaException, GrafanaUnauthorizedError

from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards.common import FOLDER_TITLE, FOLDER_UID

_T = TypeVar("_T")


class GrafanaUnavailable(RuntimeError):
    """Grafana cannot be reached or refuses the credentials: nothing can be pushed."""


@dataclass
class PushResult:
    """What one push did, per object (``kind uid``): created, updated, or failed with
    Grafana's message."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def connect(url: str, credential: str | tuple[str, str] | None) -> GrafanaApi:
    """A client for the Grafana at ``url`` (``http://host:3000``), with a service-account
    token or a (user, password) pair."""
    return GrafanaApi.from_url(url, credential=credential, timeout=30.0)


def push(
    api: GrafanaApi,
    dashboards: Sequence[dict[str, Any]],
    receivers: alerts.Receivers,
    datasource: dict[str, Any] | None = None,
    settings: alerts.AlertSettings = alerts.DEFAULTS,
) -> PushResult:
    """Upsert everything; an object Grafana rejects is recorded and the rest still pushed.
    Raises :class:`GrafanaUnavailable` when Grafana is unreachable or refuses the login."""
    result = PushResult()
    _step(result, f"folder {FOLDER_UID}", lambda: _folder(api))
    if datasource is not None:
        _step(result, f"datasource {datasource['uid']}", lambda: _datasource(api, datasource))
    for dashboard in dashboards:
        _step(result, f"dashboard {dashboard['uid']}", lambda d=dashboard: _dashboard(api, d))
    _step(result, f"rule-group {alerts.GROUP}", lambda: _rule_group(api, settings))
    points = alerts.contact_points(receivers)
    if points:
        provisioning = api.alertingprovisioning
        try:
            listed = _reachable(lambda: provisioning.get_contactpoints(name=alerts.RECEIVER))
        except GrafanaClientError as exc:
            result.failed.append(f"contact-points {alerts.RECEIVER}: {_message(exc)}")
            return result
        existing = {p["uid"] for p in listed}
        for point in points:
            _step(
                result,
                f"contact-point {point['uid']}",
                lambda p=point: _contact_point(api, p, p["uid"] in existing),
            )
        _step(result, "notification-policy", lambda: _policy(api))
    return result


def _step(result: PushResult, name: str, action: Callable[[], bool]) -> None:
    """Run one upsert (True: created, False: updated), recording a rejection and going on."""
    try:
        created = _reachable(action)
    except GrafanaClientError as exc:
        result.failed.append(f"{name}: {_message(exc)}")
        return
    (result.created if created else result.updated).append(name)


def _reachable(call: Callable[[], _T]) -> _T:
    """``call()``, with "cannot push anything" failures raised as GrafanaUnavailable."""
    try:
        return call()
    except GrafanaUnauthorizedError as exc:
        raise GrafanaUnavailable(f"Grafana refused the credentials: {exc.message}") from exc
    except GrafanaClientError:
        raise
    except (GrafanaException, OSError) as exc:
        raise GrafanaUnavailable(f"cannot reach Grafana: {exc}") from exc


def _rule_group(api: GrafanaApi, settings: alerts.AlertSettings) -> bool:
    group = alerts.rule_group(settings)
    api.alertingprovisioning.update_rule_group(FOLDER_UID, alerts.GROUP, group)
    return False


def _policy(api: GrafanaApi) -> bool:
    api.alertingprovisioning.set_notification_policy_tree(alerts.notification_policy())
    return False


def _message(exc: GrafanaClientError) -> str:
    """Grafana's own message for a rejected request, with its HTTP status."""
    response = exc.response
    text = response.get("message") if isinstance(response, dict) else None
    return f"HTTP {exc.status_code}: {text or response}"


def _exists(get: Callable[[], object]) -> bool:
    try:
        get()
    except GrafanaClientError as exc:
        if exc.status_code == 404:
            return False
        raise
    return True


def _folder(api: GrafanaApi) -> bool:
    if _exists(lambda: api.folder.get_folder(FOLDER_UID)):
        return False
    api.folder.create_folder(FOLDER_TITLE, uid=FOLDER_UID)
    return True


def _datasource(api: GrafanaApi, datasource: dict[str, Any]) -> bool:
    if _exists(lambda: api.datasource.get_datasource_by_uid(datasource["uid"])):
        api.datasource.update_datasource_by_uid(datasource["uid"], datasource)
        return False
    api.datasource.create_datasource(datasource)
    return True


def _dashboard(api: GrafanaApi, dashboard: dict[str, Any]) -> bool:
    response = api.dashboard.update_dashboard(
        {
            "dashboard": {**dashboard, "id": None},
            "folderUid": FOLDER_UID,
            "overwrite": True,
            "message": "kernelwatch dashboards push",
        }
    )
    return response.get("version") == 1


def _contact_point(api: GrafanaApi, point: dict[str, Any], exists: bool) -> bool:
    if exists:
        api.alertingprovisioning.update_contactpoint(point["uid"], point)
        return False
    api.alertingprovisioning.create_contactpoint(point)
    return True
