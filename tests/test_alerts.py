"""Alerts people trust: one announcer per regression, an announcement that says what moved,
where, by how much and what to run next, acknowledging that silences without a RESOLVED,
backlog reminders that are not pages, and pipeline alerts only for configured pools."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import psycopg
import pytest
from psycopg.rows import dict_row
from synthetic_fleet import Fleet, add_regressions, fleet_runs
from webhooks import webhook_recorder

from kernelwatch.config.settings import Notifications, parse
from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards import inventory
from kernelwatch.dashboards.macros import expand
from kernelwatch.flows.notify import send
from kernelwatch.flows.reporting import notice
from kernelwatch.store.ingest import Ingester
from kernelwatch.store.triage_state import apply_move

GRAFANA = "http://grafana.example:3000"


@pytest.fixture
def regression(store_url):
    """A store with a short history and one untriaged regression whose culprit is known:
    (database URL, regression id)."""
    with psycopg.connect(store_url) as conn:
        ingester = Ingester(conn)
        for run in fleet_runs(Fleet(models=1, series=4, days=6, samples=5, pr_runs_per_day=0),
                              datetime.now(UTC)):  # fmt: skip
            ingester.ingest(run)
        add_regressions(conn, 4, seed=1)
        (regression_id,) = conn.execute(
            "UPDATE regressions SET state = 'untriaged', magnitude = 0.031, "
            "good_commit_id = (SELECT id FROM commits ORDER BY author_time LIMIT 1) "
            "RETURNING id"
        ).fetchone()
        conn.commit()
    return store_url, regression_id


def _config(text: str):
    import tomllib

    return parse(tomllib.loads(text), None)


def _rule(settings: alerts.AlertSettings, uid: str) -> alerts.RuleSpec:
    (spec,) = [s for s in alerts.rules(settings) if s.uid == uid]
    return spec


def _instances(url: str, spec: alerts.RuleSpec) -> list[dict]:
    """The rule's firing instances as Grafana evaluates it now, read as the reader role."""
    with psycopg.connect(url) as conn, conn.cursor(row_factory=dict_row) as cur:
        cur.execute("SET ROLE kernelwatch_reader")
        rows = cur.execute(expand(spec.sql, inventory.alert_request(spec, datetime.now(UTC))))
        rows = rows.fetchall()
    value = [k for k, v in rows[0].items() if isinstance(v, int | float)] if rows else []
    return [r for r in rows if value and float(r[value[-1]]) > spec.above]


def test_the_flow_announces_a_regression_once_with_culprit_magnitude_links_and_command(
    regression,
):
    url, regression_id = regression
    with webhook_recorder() as (base, received):
        config = _config(
            f'[notifications]\nwebhooks = ["{base}/hook"]\ngrafana_url = "{GRAFANA}"\n'
        )
        targets = config.notifications
        assert targets.announced_by == "flow"
        with psycopg.connect(url) as conn:
            announced = notice(conn, regression_id, None, targets)
        assert send([announced], targets) == []
    ((path, body),) = received
    (sent,) = body["regressions"]
    assert path == "/hook" and sent["regression_id"] == regression_id
    assert sent["magnitude_pct"] == pytest.approx(3.1)
    assert sent["culprit"] and sent["good"] and sent["bad"]
    assert sent["culprit"] in sent["command"] and sent["command"].startswith("git worktree add")
    link = urlparse(sent["panel_url"])
    assert f"{link.scheme}://{link.netloc}" == GRAFANA and link.path == "/d/kw-history/"
    query = parse_qs(link.query)
    assert {"var-case", "var-gpu", "var-kernel", "var-dtype", "from", "to"} <= set(query)
    # Grafana, the other announcer, has no rule that would announce it a second time; its
    # serving rule stays, as no flow announces a serving regression.
    settings = alerts.AlertSettings.from_config(config)
    pages = [s for s in alerts.rules(settings) if s.kind == "regression" and s.severity != "info"]
    assert [s.uid for s in pages] == ["kw-serving-regression"]


def test_without_webhooks_grafana_announces_and_the_flow_stays_quiet():
    assert Notifications().announced_by == "grafana"
    uids = {s.uid for s in alerts.rules(alerts.DEFAULTS)}
    assert "kw-regression-open" in uids
    flow = alerts.AlertSettings.from_config(_config('[notifications]\nannouncer = "flow"\n'))
    assert "kw-regression-open" not in {s.uid for s in alerts.rules(flow)}


def test_acknowledging_sends_no_resolved_and_resolving_sends_one(regression):
    url, regression_id = regression
    spec = _rule(alerts.DEFAULTS, "kw-regression-open")

    def labels() -> list[dict]:
        return [i for i in _instances(url, spec) if i["regression_id"] == str(regression_id)]

    firing = labels()
    assert len(firing) == 1
    assert firing[0]["magnitude"] == "+3.1%" and ".." in firing[0]["range"]
    assert firing[0]["command"].startswith(f"kernelwatch bisect --regression {regression_id}")
    with psycopg.connect(url) as conn:
        apply_move(conn, regression_id, "acknowledged", "alice")
    # The same instance, with the same labels, still firing: Grafana sends nothing, and the
    # announcement route repeats it only after a month.
    assert labels() == firing
    with psycopg.connect(url) as conn:
        apply_move(conn, regression_id, "fixed", "alice")
    assert labels() == []  # the instance goes: Grafana sends RESOLVED


def test_backlog_reminders_are_not_pages_and_every_rule_has_a_runbook():
    group = alerts.rule_group()
    by_uid = {r["uid"]: r for r in group["rules"]}
    assert by_uid["kw-regression-stale"]["labels"]["severity"] == "info"
    text = (Path(__file__).parent.parent / "docs" / "DASHBOARDS.md").read_text()
    for uid, rule in by_uid.items():
        runbook = rule["annotations"]["runbook_url"]
        assert runbook == f"docs/DASHBOARDS.md#runbook-{uid}"
        assert f'<a id="runbook-{uid}"></a>' in text, uid
    routes = alerts.notification_policy()["routes"]
    repeat = {tuple(map(tuple, r["object_matchers"])): r["repeat_interval"] for r in routes}
    assert repeat[(("severity", "=", "info"),)] == "168h"
    assert repeat[(("kind", "=", "regression"), ("severity", "=", "warning"))] == "720h"


def test_announcements_link_to_their_panel():
    for rule in alerts.rule_group()["rules"]:
        annotations = rule["annotations"]
        assert annotations["__dashboardUid__"] in ("kw-triage", "kw-health", "kw-serving"), rule[
            "uid"
        ]
        assert int(annotations["__panelId__"]) >= 1


def test_with_the_flow_announcing_ack_sends_nothing_and_resolve_sends_one_resolved(
    regression, kernelwatch_cli, monkeypatch, tmp_path
):
    url, regression_id = regression
    monkeypatch.setenv("KERNELWATCH_DATABASE_URL", url)
    with webhook_recorder() as (base, received):
        config = tmp_path / "kernelwatch.toml"
        config.write_text(f'[notifications]\nwebhooks = ["{base}/hook"]\n')
        monkeypatch.setenv("KERNELWATCH_CONFIG", str(config))
        acked = kernelwatch_cli("regressions", "ack", str(regression_id), "--by", "alice")
        assert acked.returncode == 0, acked.stderr
        assert received == []
        resolved = kernelwatch_cli(
            "regressions", "resolve", str(regression_id), "--as", "fixed", "--by", "alice"
        )
        assert resolved.returncode == 0, resolved.stderr
    ((path, body),) = received
    assert path == "/hook" and body["event"] == "kernelwatch.resolved"
    ((notice),) = body["resolved"]
    assert (notice["regression_id"], notice["state"], notice["by"]) == (
        regression_id, "fixed", "alice",
    )  # fmt: skip
