"""The generated dashboards and alerting checked without a database: structure (schema
version, ids, grid, data-source binding), the macro expander against Grafana's own test
vectors, the committed provisioning files against the generator, the compose stack and the
Kubernetes work-pool templates, and ``kernelwatch dashboards export``."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards import catalog, checks, datasource
from kernelwatch.dashboards.export import ALERTING_FILE, dump
from kernelwatch.dashboards.macros import ExpansionError, Request, Variable, expand, rfc3339
from kernelwatch.dashboards.sqlquery import DATASOURCE_TYPE, DATASOURCE_UID, SqlQuery

ROOT = Path(__file__).parent.parent
INFRA = ROOT / "infra"
POOLS = {"gpu-h100": "NVIDIA-H100-80GB-HBM3", "gpu-h200": "NVIDIA-H200", "gpu-b200": "NVIDIA-B200"}
# Grafana's macros_test.go: a five-minute range on 2018-04-12.
FROM = datetime(2018, 4, 12, 18, 0, tzinfo=UTC)
GRAFANA_TEST = Request(FROM, FROM + timedelta(minutes=5))


@pytest.fixture(scope="module")
def dashboards():
    return catalog.dashboards()


def test_generated_dashboards_are_structurally_sound(dashboards):
    assert checks.problems(dashboards) == []
    assert [d["uid"] for d in dashboards] == [
        "kw-fleet", "kw-pr", "kw-history", "kw-quarter", "kw-sol", "kw-builds", "kw-health",
        "kw-triage", "kw-comm", "kw-serving",
    ]  # fmt: skip
    assert {d["schemaVersion"] for d in dashboards} == {checks.SCHEMA_VERSION}


def test_checks_find_each_kind_of_problem(dashboards):
    broken = copy.deepcopy(dashboards[0])
    broken["schemaVersion"] = 39
    first, second = broken["panels"][0], broken["panels"][1]
    second["id"] = first["id"]
    second["gridPos"] = {**first["gridPos"], "x": 2}
    broken["panels"][2]["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prom"}
    broken["panels"][3]["targets"] = []
    broken["panels"][4]["gridPos"]["x"] = 20
    found = checks.problems([broken, copy.deepcopy(dashboards[0])])
    expected = [
        "dashboard uid 'kw-fleet' is used more than once",
        "schemaVersion is 39, not 41",
        f"panel id {first['id']} is used more than once",
        "overlap",
        "is bound to {'type': 'prometheus', 'uid': 'prom'}",
        "has no query",
        "is outside the 24-column grid",
    ]
    for text in expected:
        assert any(text in line for line in found), (text, found)


def test_panels_and_variables_read_back_through_the_sdk(dashboards):
    for dashboard in dashboards:
        model = Dashboard.from_json(dashboard)
        targets = [t for p in model.panels for t in p.targets]
        assert targets and all(isinstance(t, SqlQuery) for t in targets)
        back = json.loads(json.dumps(model, cls=JSONEncoder))
        assert back["panels"] == dashboard["panels"]
        assert back["templating"] == dashboard["templating"]


def test_every_query_is_on_the_kernelwatch_datasource_and_reads_report_objects(dashboards):
    sql = [t["rawSql"] for d in dashboards for p in d["panels"] for t in p["targets"]]
    sql += [a["target"]["rawSql"] for d in dashboards for a in d["annotations"]["list"]]
    sql += [v["query"] for d in dashboards for v in d["templating"]["list"] if v["type"] == "query"]
    sql += [spec.sql for spec in alerts.rules()]
    for text in sql:
        relations = re.findall(r"\bFROM\s+(\w+)", text)
        # a WITH query's own names are not relations of the store
        own = set(re.findall(r"(\w+)\s+AS\s+\(", text))
        assert relations and all(r.startswith("report_") or r in own for r in relations), text
        assert any(r.startswith("report_") for r in relations), text


# --- the macro expander, against Grafana's pkg/tsdb/grafana-postgresql-datasource tests ---


@pytest.mark.parametrize(
    ("sql", "expanded"),
    [
        ("select $__time(time_column)", 'select time_column AS "time"'),
        ("select $__timeEpoch(c)", 'select extract(epoch from c) as "time"'),
        (
            "WHERE $__timeFilter(time_column)",
            "WHERE time_column BETWEEN '2018-04-12T18:00:00Z' AND '2018-04-12T18:05:00Z'",
        ),
        ("select $__timeFrom()", "select '2018-04-12T18:00:00Z'"),
        ("select $__timeTo()", "select '2018-04-12T18:05:00Z'"),
        (
            "SELECT $__timeGroup(time_column,'5m')",
            "SELECT floor(extract(epoch from time_column)/300)*300",
        ),
        (
            "SELECT $__timeGroupAlias(time_column,'5m')",
            'SELECT floor(extract(epoch from time_column)/300)*300 AS "time"',
        ),
        # before Grafana 5.3 $__timeGroup added the alias itself; a comma after it still does
        (
            "SELECT $__timeGroup(time_column,'5m'), value",
            'SELECT floor(extract(epoch from time_column)/300)*300 AS "time", value',
        ),
        ("$__timeGroup(time_column , '5m')", "floor(extract(epoch from time_column)/300)*300"),
        ("select $__unixEpochFilter(time)", "select time >= 1523556000 AND time <= 1523556300"),
        ("SELECT $__interval, $__interval_ms", "SELECT 1h, 3600000"),
    ],
)
def test_macros_expand_as_grafana_does(sql, expanded):
    assert expand(sql, GRAFANA_TEST) == expanded


def test_rfc3339_keeps_fractions_without_trailing_zeros():
    moment = datetime(1960, 2, 1, 7, 0, 0, 500_000, tzinfo=UTC)
    assert rfc3339(moment) == "1960-02-01T07:00:00.5Z"


def test_template_variables_are_quoted_as_grafanas_sql_datasources_do():
    gpus = Variable(("NVIDIA H200", "O'Brien GPU"), multi=True)
    one = Variable.single("it's")
    variables = {"gpu": gpus, "repo": one}
    assert expand("IN ($gpu)", GRAFANA_TEST, variables) == "IN ('NVIDIA H200','O''Brien GPU')"
    assert expand("= '$repo'", GRAFANA_TEST, variables) == "= 'it''s'"
    assert expand("= ${repo:sqlstring}", GRAFANA_TEST, variables) == "= 'it''s'"
    assert expand("[[gpu:raw]] ${gpu:csv}", GRAFANA_TEST, variables) == (
        "NVIDIA H200,O'Brien GPU NVIDIA H200,O'Brien GPU"
    )
    assert expand("${repo}", GRAFANA_TEST, variables) == "it''s"


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("WHERE x = '$unknown'", "no value for template variable 'unknown'"),
        ("SELECT $__nope(x)", "unknown macro '__nope'"),
        ("SELECT ${gpu:regex}", "unsupported variable format 'regex'"),
        ("SELECT $__timeGroup(t)", "needs time column and interval"),
        ("SELECT $__timeGroup(t, 'soon')", "cannot parse interval"),
        ("SELECT $__timeFilter()", "missing time column"),
    ],
)
def test_expansion_refuses_what_grafana_would_reject(sql, message):
    with pytest.raises(ExpansionError, match=re.escape(message)):
        expand(sql, GRAFANA_TEST, {"gpu": Variable.single("x")})


# --- alerting and the data source ---


def test_alert_rules_are_sql_reduce_threshold_on_the_datasource():
    group = alerts.rule_group()
    assert group["interval"] == alerts.GROUP_INTERVAL_S and group["folderUid"] == "kernelwatch"
    uids = [r["uid"] for r in group["rules"]]
    assert len(set(uids)) == len(uids) == len(alerts.rules())
    for rule, spec in zip(group["rules"], alerts.rules(), strict=True):
        sql, reduce, threshold = rule["data"]
        assert rule["condition"] == "C" and rule["noDataState"] == "OK"
        assert sql["datasourceUid"] == DATASOURCE_UID
        assert sql["relativeTimeRange"] == {"from": spec.window_s, "to": 0}
        assert sql["model"]["datasource"] == {"type": DATASOURCE_TYPE, "uid": DATASOURCE_UID}
        assert reduce["model"] == {"expression": "A", "reducer": "last", "refId": "B",
                                   "type": "reduce"}  # fmt: skip
        (condition,) = threshold["model"]["conditions"]
        assert condition["evaluator"] == {"params": [float(spec.above)], "type": "gt"}


def test_contact_points_leave_out_receivers_not_given():
    points = alerts.contact_points(alerts.Receivers(slack_url="https://hooks.slack.example/x"))
    assert [(p["uid"], p["type"], p["name"]) for p in points] == [
        ("kw-slack", "slack", alerts.RECEIVER)
    ]
    assert alerts.contact_points(alerts.Receivers()) == []
    routes = alerts.notification_policy()["routes"]
    assert {r["receiver"] for r in routes} == {alerts.RECEIVER}


def test_datasource_from_a_reader_url():
    source = datasource.from_url(
        "postgresql://kernelwatch_reader:s3cret@db.example:6432/kernelwatch"
    )
    assert (source["uid"], source["type"], source["url"], source["user"]) == (
        DATASOURCE_UID, DATASOURCE_TYPE, "db.example:6432", "kernelwatch_reader",
    )  # fmt: skip
    assert source["jsonData"]["database"] == "kernelwatch"
    assert source["secureJsonData"] == {"password": "s3cret"}
    with pytest.raises(datasource.DatasourceError, match="not a socket dir"):
        datasource.from_url("postgresql://kernelwatch_reader@/kernelwatch?host=/run/pg")
    with pytest.raises(datasource.DatasourceError, match="no dbname"):
        datasource.from_url("postgresql://kernelwatch_reader@db.example")


# --- the committed provisioning and deployment files ---


def test_committed_grafana_files_are_what_the_generator_writes(dashboards):
    regenerate = (
        "run: kernelwatch dashboards export infra/grafana/dashboards "
        "--provisioning infra/grafana/provisioning"
    )
    committed = sorted((INFRA / "grafana" / "dashboards").glob("*.json"))
    assert [p.stem for p in committed] == sorted(d["uid"] for d in dashboards), regenerate
    for dashboard in dashboards:
        path = INFRA / "grafana" / "dashboards" / f"{dashboard['uid']}.json"
        assert path.read_text() == dump(dashboard), regenerate
    alerting = INFRA / "grafana" / "provisioning" / ALERTING_FILE
    assert alerting.read_text() == dump(alerts.provisioning_file()), regenerate


def test_provisioning_binds_the_read_only_role_and_the_dashboards_folder():
    provisioning = INFRA / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "kernelwatch.yaml").read_text())[
        "datasources"
    ]
    assert (source["uid"], source["type"], source["user"]) == (
        DATASOURCE_UID, DATASOURCE_TYPE, datasource.READER_ROLE,
    )  # fmt: skip
    assert source["jsonData"]["database"] == "kernelwatch"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "kernelwatch.yaml").read_text())[
        "providers"
    ]
    alerting = json.loads((provisioning / ALERTING_FILE).read_text())
    assert provider["folder"] == alerting["groups"][0]["folder"] == "kernelwatch"
    compose = yaml.safe_load((INFRA / "compose.yaml").read_text())
    mounts = compose["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in mounts
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in mounts
    env = compose["services"]["grafana"]["environment"]
    for receiver in alerting["contactPoints"][0]["receivers"]:
        (variable,) = re.findall(r"\$\{(\w+)\}", json.dumps(receiver["settings"]))
        # Secret ones come from a file (NAME_FILE, infra/docker/env-from-secrets.sh).
        assert variable in env or f"{variable}_FILE" in env, variable


def test_compose_runs_the_whole_stack():
    services = yaml.safe_load((INFRA / "compose.yaml").read_text())["services"]
    stack = {"postgres", "migrate", "grafana", "prefect-server", "worker-h100", "runner-h100"}
    assert stack <= set(services)
    assert services["grafana"]["image"].startswith("grafana/grafana:11.")
    prefect = services["prefect-server"]["environment"]
    assert prefect["PREFECT_SERVER_DATABASE_DRIVER"] == "postgresql+asyncpg"
    assert (prefect["PREFECT_SERVER_DATABASE_HOST"], prefect["PREFECT_SERVER_DATABASE_NAME"]) == (
        "postgres", "prefect",
    )  # fmt: skip
    worker, runner = services["worker-h100"], services["runner-h100"]
    assert worker["command"][:5] == ["prefect", "worker", "start", "--pool", "gpu-h100"]
    assert worker["build"]["dockerfile"] == "infra/docker/Dockerfile"
    # The GPU is the runner's, where kernel code runs; the worker reports.
    assert "deploy" not in worker
    (gpu,) = runner["deploy"]["resources"]["reservations"]["devices"]
    assert gpu["count"] == 1 and gpu["capabilities"] == ["gpu"]
    assert "kernelwatch_writer" in worker["environment"]["KERNELWATCH_DATABASE_URL"]
    assert services["migrate"]["command"] == ["kernelwatch", "db", "upgrade"]


@pytest.mark.parametrize(("pool", "product"), sorted(POOLS.items()))
def test_kubernetes_pools_ask_for_one_gpu_of_their_type(pool, product):
    template = json.loads((INFRA / "k8s" / "base-job-templates" / f"{pool}.json").read_text())
    pod = template["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    # The flow run reports and holds no GPU; the pool's runner on its node holds one.
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": product}
    runners = list(yaml.safe_load_all((INFRA / "k8s" / "runners.yaml").read_text()))
    daemons = [r for r in runners if r and r["kind"] == "DaemonSet"]
    (runner,) = [r for r in daemons if r["metadata"]["labels"]["kernelwatch.dev/pool"] == pool]
    spec = runner["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": product}
    resources = spec["containers"][0]["resources"]
    assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == 1
    placeholders = set(re.findall(r"\{\{ (\w+) \}\}", json.dumps(template["job_configuration"])))
    assert placeholders <= set(template["variables"]["properties"])
    workers = list(yaml.safe_load_all((INFRA / "k8s" / "workers.yaml").read_text()))
    (worker,) = [w for w in workers if w["metadata"]["labels"]["pool"] == pool]
    script = worker["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert f"--base-job-template /templates/{pool}.json" in script
    assert f"prefect worker start --pool {pool} --type kubernetes" in script
    kustomization = yaml.safe_load((INFRA / "k8s" / "kustomization.yaml").read_text())
    assert f"base-job-templates/{pool}.json" in kustomization["configMapGenerator"][0]["files"]


# --- kernelwatch dashboards export ---


def test_export_writes_every_dashboard_and_the_alerting_file(kernelwatch_cli, tmp_path):
    result = kernelwatch_cli(
        "dashboards", "export", str(tmp_path / "out"), "--provisioning", str(tmp_path / "prov")
    )
    assert result.returncode == 0, result.stderr
    written = sorted(Path(line).name for line in result.stdout.split())
    assert written == sorted([f"{u}.json" for u in (d["uid"] for d in catalog.dashboards())]
                             + ["kernelwatch.json"])  # fmt: skip
    fleet = json.loads((tmp_path / "out" / "kw-fleet.json").read_text())
    assert fleet["uid"] == "kw-fleet"
    (tmp_path / "file").write_text("")
    refused = kernelwatch_cli("dashboards", "export", str(tmp_path / "file"))
    assert refused.returncode == 2 and refused.stderr.startswith("error: ")


def test_export_writes_the_alert_rules_of_kernelwatch_toml(kernelwatch_cli, tmp_path):
    (tmp_path / "kernelwatch.toml").write_text(
        '[pools.h100]\ngpu = "H100"\n\n[notifications]\nannouncer = "flow"\n'
    )
    result = kernelwatch_cli("dashboards", "export", "out", "--provisioning", "prov", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    alerting = json.loads((tmp_path / "prov" / "alerting" / "kernelwatch.json").read_text())
    rules = {r["uid"]: r for r in alerting["groups"][0]["rules"]}
    assert "kw-regression-open" not in rules  # the flow announces
    sql = rules["kw-nightly-missing"]["data"][0]["model"]["rawSql"]
    assert "pool IN ('h100')" in sql
    (tmp_path / "kernelwatch.toml").write_text('[notifications]\nannouncer = "pager"\n')
    refused = kernelwatch_cli("dashboards", "export", "out", "--provisioning", "p", cwd=tmp_path)
    assert refused.returncode == 2 and "announcer must be one of flow, grafana" in refused.stderr


def test_every_panel_says_what_it_shows(dashboards):
    missing = [(d["uid"], p["title"]) for d in dashboards for p in d["panels"]
               if len(p.get("description", "")) < 40]  # fmt: skip
    assert missing == []
