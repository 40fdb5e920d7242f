"""``kernelwatch dashboards push`` through grafana-client, against a local HTTP server that
records every request and answers as Grafana's HTTP API does (no Grafana server can be
installed on these machines): 404 for what is not there, 409/400 for duplicates, 401 for a
wrong token, versioned dashboards, rule groups replaced by uid, policies that must name an
existing contact point."""

from __future__ import annotations

import base64
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards import catalog, datasource, push

TOKEN = "kw-test-token"
RECEIVERS = alerts.Receivers(
    webhook_url="http://hooks.example/kw", slack_url="https://hooks.slack.example/T/B/x",
    emails="perf@example.com",
)  # fmt: skip


@dataclass
class GrafanaState:
    """What the fake Grafana holds, and every request it was sent."""

    folders: dict[str, dict] = field(default_factory=dict)
    datasources: dict[str, dict] = field(default_factory=dict)
    dashboards: dict[str, dict] = field(default_factory=dict)
    rules: dict[str, dict] = field(default_factory=dict)
    groups: dict[tuple[str, str], int] = field(default_factory=dict)
    contact_points: dict[str, dict] = field(default_factory=dict)
    policy: dict | None = None
    requests: list[tuple[str, str]] = field(default_factory=list)
    reject_dashboards: set[str] = field(default_factory=set)

    def count(self, method: str, prefix: str) -> int:
        return sum(m == method and p.startswith(prefix) for m, p in self.requests)


class _Handler(BaseHTTPRequestHandler):
    state: GrafanaState

    def log_message(self, *_args: Any) -> None:  # keep pytest's output clean
        pass

    def _reply(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorised(self) -> bool:
        header = self.headers.get("Authorization", "")
        basic = "Basic " + base64.b64encode(b"admin:admin").decode()
        return header in (f"Bearer {TOKEN}", basic)

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        self.state.requests.append((method, url.path))
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        if not self._authorised():
            return self._reply(401, {"message": "Unauthorized"})
        parts = url.path.strip("/").split("/")[1:]  # drop "api"
        status, answer = self._route(method, parts, body, parse_qs(url.query))
        self._reply(status, answer)

    def _route(self, method: str, parts: list[str], body: Any, query: dict) -> tuple[int, Any]:
        s = self.state
        match method, parts:
            case "GET", ["folders", uid]:
                return (
                    (200, s.folders[uid])
                    if uid in s.folders
                    else (404, {"message": "folder not found"})
                )
            case "POST", ["folders"]:
                if body["uid"] in s.folders:
                    return 409, {"message": "a folder with the same uid already exists"}
                s.folders[body["uid"]] = {"uid": body["uid"], "title": body["title"]}
                return 200, s.folders[body["uid"]]
            case "GET", ["datasources", "uid", uid]:
                return (
                    (200, s.datasources[uid])
                    if uid in s.datasources
                    else (404, {"message": "Data source not found"})
                )
            case "POST", ["datasources"]:
                if body["uid"] in s.datasources:
                    return 409, {"message": "data source with the same uid already exists"}
                s.datasources[body["uid"]] = body
                return 200, {"datasource": body, "message": "Datasource added"}
            case "PUT", ["datasources", "uid", uid]:
                s.datasources[uid] = body
                return 200, {"datasource": body, "message": "Datasource updated"}
            case "POST", ["dashboards", "db"]:
                dashboard = body["dashboard"]
                uid = dashboard["uid"]
                if uid in s.reject_dashboards:
                    return 400, {"message": f"Dashboard {uid} rejected by the test"}
                if body.get("folderUid") not in s.folders:
                    return 400, {"message": "folder not found"}
                if uid in s.dashboards and not body.get("overwrite"):
                    return 412, {"status": "name-exists", "message": "dashboard exists"}
                version = s.dashboards.get(uid, {}).get("version", 0) + 1
                s.dashboards[uid] = {"dashboard": dashboard, "folderUid": body["folderUid"],
                                     "version": version}  # fmt: skip
                return 200, {"uid": uid, "status": "success", "version": version}
            case "PUT", ["v1", "provisioning", "folder", folder, "rule-groups", group]:
                if folder not in s.folders:
                    return 404, {"message": "folder does not exist"}
                kept = {r["uid"] for r in body["rules"]}
                for uid in [u for u, r in s.rules.items() if (r["folderUID"], r["ruleGroup"])
                            == (folder, group) and u not in kept]:  # fmt: skip
                    del s.rules[uid]
                for rule in body["rules"]:
                    s.rules[rule["uid"]] = {**rule, "folderUID": folder, "ruleGroup": group}
                s.groups[folder, group] = body["interval"]
                return 200, body
            case "GET", ["v1", "provisioning", "contact-points"]:
                names = query.get("name", [])
                return 200, [
                    p for p in s.contact_points.values() if not names or p["name"] in names
                ]
            case "POST", ["v1", "provisioning", "contact-points"]:
                if body["uid"] in s.contact_points:
                    return 400, {"message": "contact point with this uid already exists"}
                s.contact_points[body["uid"]] = body
                return 202, body
            case "PUT", ["v1", "provisioning", "contact-points", uid]:
                if uid not in s.contact_points:
                    return 404, {"message": "contact point not found"}
                s.contact_points[uid] = body
                return 202, {"message": "contactpoint updated"}
            case "PUT", ["v1", "provisioning", "policies"]:
                names = {p["name"] for p in s.contact_points.values()}
                receivers = {body["receiver"], *(r["receiver"] for r in body.get("routes", []))}
                if not receivers <= names:
                    return 400, {"message": f"receivers {sorted(receivers - names)} do not exist"}
                s.policy = body
                return 202, {"message": "policies updated"}
        return 404, {"message": "Not found"}

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")


@pytest.fixture
def grafana():
    """A fake Grafana on a free local port: (its URL, its state)."""
    state = GrafanaState()
    handler = type("Handler", (_Handler,), {"state": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", state
    server.shutdown()
    server.server_close()


def _push(url: str, receivers: alerts.Receivers = RECEIVERS) -> push.PushResult:
    source = datasource.from_url("postgresql://kernelwatch_reader:pw@postgres:5432/kernelwatch")
    return push.push(push.connect(url, TOKEN), catalog.dashboards(), receivers, source)


def test_pushing_twice_upserts_everything_by_uid_and_duplicates_nothing(grafana):
    url, state = grafana
    dashboards = [d["uid"] for d in catalog.dashboards()]
    first = _push(url)
    assert first.failed == []
    assert first.created == [
        "folder kernelwatch", "datasource kernelwatch-pg",
        *(f"dashboard {uid}" for uid in dashboards),
        "contact-point kw-webhook", "contact-point kw-slack", "contact-point kw-email",
    ]  # fmt: skip
    assert first.updated == ["rule-group kernelwatch", "notification-policy"]

    second = _push(url)
    assert second.failed == [] and second.created == []
    assert len(second.updated) == len(first.created) + len(first.updated)

    assert list(state.folders) == ["kernelwatch"] and list(state.datasources) == ["kernelwatch-pg"]
    assert sorted(state.dashboards) == sorted(dashboards)
    assert {d["version"] for d in state.dashboards.values()} == {2}
    assert {d["folderUid"] for d in state.dashboards.values()} == {"kernelwatch"}
    assert sorted(state.rules) == sorted(spec.uid for spec in alerts.rules())
    assert state.groups == {("kernelwatch", "kernelwatch"): alerts.GROUP_INTERVAL_S}
    assert sorted(state.contact_points) == ["kw-email", "kw-slack", "kw-webhook"]
    assert state.policy["receiver"] == alerts.RECEIVER
    # creations happened once; the second push only looked and updated
    assert state.count("POST", "/api/folders") == 1
    assert state.count("POST", "/api/datasources") == 1
    assert state.count("POST", "/api/v1/provisioning/contact-points") == 3
    assert state.count("PUT", "/api/v1/provisioning/contact-points/") == 3


def test_a_rejected_dashboard_is_reported_and_the_rest_still_pushed(grafana):
    url, state = grafana
    state.reject_dashboards.add("kw-sol")
    result = _push(url, alerts.Receivers())
    assert result.failed == ["dashboard kw-sol: HTTP 400: Dashboard kw-sol rejected by the test"]
    assert "kw-sol" not in state.dashboards and len(state.dashboards) == len(catalog.MODULES) - 1
    assert len(state.rules) == len(alerts.rules())
    # no receiver given: contact points and the policy tree are left alone
    assert state.contact_points == {} and state.policy is None


def test_wrong_credentials_stop_the_push(grafana):
    url, state = grafana
    with pytest.raises(push.GrafanaUnavailable, match="refused the credentials"):
        push.push(push.connect(url, "wrong"), catalog.dashboards(), RECEIVERS)
    assert state.requests == [("GET", "/api/folders/kernelwatch")]


def test_push_command(grafana, kernelwatch_cli):
    url, state = grafana
    ok = kernelwatch_cli("dashboards", "push", "--url", url, "--user", "admin", "--password",
                         "admin", "--webhook-url", "http://hooks.example/kw")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    lines = ok.stdout.splitlines()
    assert "created folder kernelwatch" in lines and "created dashboard kw-fleet" in lines
    assert "created contact-point kw-webhook" in lines and "updated notification-policy" in lines
    assert list(state.contact_points) == ["kw-webhook"]

    state.reject_dashboards.add("kw-history")
    partial = kernelwatch_cli("dashboards", "push", "--url", url, "--token", TOKEN)
    assert partial.returncode == 1
    assert "error: dashboard kw-history: HTTP 400: Dashboard kw-history rejected" in partial.stderr
    assert "updated dashboard kw-fleet" in partial.stdout.splitlines()
    assert "note: no receiver given" in partial.stderr

    refused = kernelwatch_cli("dashboards", "push", "--url", url, "--token", "wrong")
    assert refused.returncode == 1 and "refused the credentials" in refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--url", "ftp://grafana"], "--url must be an http(s) URL"),
        (["--url", "http://g:3000", "--token", "t", "--user", "u", "--password", "p"],
         "either --token or --user/--password"),
        (["--url", "http://g:3000", "--user", "u"], "--user and --password go together"),
        (["--url", "http://g:3000", "--datasource-url", "postgresql://r@/kw?host=/run"],
         "--datasource-url: Grafana connects over TCP"),
    ],
)  # fmt: skip
def test_push_command_refuses_bad_input(kernelwatch_cli, args, message):
    result = kernelwatch_cli("dashboards", "push", *args)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and message in result.stderr


def test_push_command_says_when_grafana_is_unreachable(kernelwatch_cli):
    result = kernelwatch_cli(
        "dashboards", "push", "--url", "http://127.0.0.1:9", "--token", "glsa_unreachable_test"
    )
    assert result.returncode == 1
    assert result.stderr.startswith("error: http://127.0.0.1:9: cannot reach Grafana")
