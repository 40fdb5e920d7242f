"""Every SQL query the dashboards and alert rules send, with what Grafana would substitute
into it: the template variables (resolved in order, each from its own query, as Grafana
does when a dashboard loads) and the time range. Tests run these against a real
PostgreSQL; scripts/bench_dashboards.py times them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kernelwatch.dashboards import alert_rules as alerts
from kernelwatch.dashboards.macros import Request, Variable, expand

#: Runs one SQL statement and returns (column names, rows).
Runner = Callable[[str], tuple[list[str], list[tuple[Any, ...]]]]


@dataclass(frozen=True)
class Query:
    """One query: where it sits (``dashboard`` uid, ``kind`` panel / annotation / variable /
    alert, ``title``), what draws it (``panel_type``; the panel JSON in ``panel`` for
    panels), its SQL before expansion and its format."""

    dashboard: str
    kind: str
    title: str
    panel_type: str
    sql: str
    format: str
    panel: Mapping[str, Any] | None = None


def dashboard_queries(dashboard: Mapping[str, Any]) -> list[Query]:
    """Every panel target and annotation query of ``dashboard`` (variables: see
    :func:`resolve`)."""
    uid = dashboard["uid"]
    found = []
    for panel in dashboard.get("panels") or []:
        for target in panel.get("targets") or []:
            found.append(
                Query(uid, "panel", panel["title"], panel["type"], target["rawSql"],
                      target.get("format", "table"), panel)
            )  # fmt: skip
    for annotation in (dashboard.get("annotations") or {}).get("list") or []:
        target = annotation["target"]
        found.append(
            Query(uid, "annotation", annotation["name"], "annotation", target["rawSql"], "table")
        )
    return found


def alert_queries(
    settings: alerts.AlertSettings = alerts.DEFAULTS,
) -> list[tuple[alerts.RuleSpec, Query]]:
    """Each alert rule of ``settings`` with its SQL query (refId A)."""
    return [
        (spec, Query("alerting", "alert", spec.title, "alert", spec.sql.strip(), "table"))
        for spec in alerts.rules(settings)
    ]


def alert_request(spec: alerts.RuleSpec, now: datetime) -> Request:
    """The time range Grafana gives a rule's query evaluated at ``now``."""
    return Request(now - timedelta(seconds=spec.window_s), now)


def resolve(
    dashboard: Mapping[str, Any],
    request: Request,
    run: Runner,
    chosen: Mapping[str, str | Sequence[str]] | None = None,
) -> dict[str, Variable]:
    """The dashboard's variables as Grafana sets them on load: in order, each query
    variable's options read by running its (expanded) SQL; ``chosen`` picks values by
    name, else "All" where the variable has it, else its saved selection or first option."""
    chosen = chosen or {}
    values: dict[str, Variable] = {}
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        name = variable["name"]
        options = _options(variable, request, values, run)
        pick = chosen.get(name)
        if pick is not None:
            selected = (pick,) if isinstance(pick, str) else tuple(pick)
        elif variable.get("includeAll"):
            selected = options
        elif variable.get("current", {}).get("value"):
            current = variable["current"]["value"]
            selected = (current,) if isinstance(current, str) else tuple(current)
        else:
            selected = options[:1]
        values[name] = Variable(
            selected, bool(variable.get("multi")), bool(variable.get("includeAll"))
        )
    return values


def _options(
    variable: Mapping[str, Any], request: Request, values: Mapping[str, Variable], run: Runner
) -> tuple[str, ...]:
    if variable["type"] == "custom":
        return tuple(v.strip() for v in variable["query"].split(","))
    if variable["type"] == "textbox":  # what the reader typed; the saved text until then
        return (variable["query"],)
    columns, rows = run(expand(variable["query"], request, values))
    value = columns.index("__value") if "__value" in columns else 0
    text = columns.index("__text") if "__text" in columns else value
    options = [(str(row[text]), str(row[value])) for row in rows]
    return tuple(v for _t, v in _sorted(options, variable.get("sort", 0)))


def _number(text: str) -> int:
    digits = "".join(c for c in text if c.isdigit())
    return int(digits) if digits else 0


#: Grafana's variable sorts by their ascending number (the descending one is one more).
_SORT_KEYS: dict[int, Callable[[str], Any]] = {1: str, 3: _number, 5: str.lower, 7: str}


def _sorted(options: list[tuple[str, str]], sort: int) -> list[tuple[str, str]]:
    """(text, value) options in the order Grafana lists them for the variable's ``sort``:
    the query's own order when disabled, else by text (so the first option, which a
    dashboard opens on, is the newest only where the order is the query's)."""
    if sort == 0:
        return options
    key = _SORT_KEYS[sort - 1 if sort % 2 == 0 else sort]
    return sorted(options, key=lambda option: key(option[0]), reverse=sort % 2 == 0)
