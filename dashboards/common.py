"""What every kernelwatch dashboard shares: its frame (tags, links, time), the template
variables over the store's series, panels bound to the PostgreSQL data source, SQL
annotations, and the step from SDK builder to Grafana's JSON.

Panels hold only filters, Grafana macros and column choices; the SQL that knows the schema
lives in the store's ``report_*`` views and functions (``store/views/``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grafana_foundation_sdk.builders import bargauge, stat, table, timeseries
from grafana_foundation_sdk.builders import common as sdk_common
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)

from kernelwatch.dashboards import links
from kernelwatch.dashboards.sqlquery import DATASOURCE, Format, Sql

TAG = "kernelwatch"
FOLDER_UID = "kernelwatch"
FOLDER_TITLE = "kernelwatch"


def new_dashboard(uid: str, title: str, description: str, since: str) -> sdk.Dashboard:
    """A dashboard in kernelwatch's frame: tagged, linked to the others, UTC, showing the
    last ``since`` (a Grafana relative time such as ``90d``)."""
    return (
        sdk.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .timezone("utc")
        .time(f"now-{since}", "now")
        .refresh("15m")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .annotations([])  # Grafana expects the list even when a dashboard has none
        .editable()
        .link(
            sdk.DashboardLink("kernelwatch")
            .type(DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )


def variable(
    name: str,
    label: str,
    sql: str,
    *,
    multi: bool = False,
    include_all: bool = False,
    in_query_order: bool = False,
) -> sdk.QueryVariable:
    """A template variable whose options are the rows of ``sql`` (one column, or
    ``__text``/``__value``), re-read whenever the dashboard loads; sorted by text unless
    ``in_query_order`` (newest first, say: the first option is the one a dashboard opens)."""
    query = (
        sdk.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(sql.strip())
        .refresh(VariableRefresh.ON_DASHBOARD_LOAD)
        .sort(VariableSort.DISABLED if in_query_order else VariableSort.ALPHABETICAL_ASC)
        .multi(multi)
        .include_all(include_all)
    )
    if include_all:
        query = query.current(VariableOption(text="All", value="$__all", selected=True))
    return query


def choice(name: str, label: str, values: list[str], selected: list[str]) -> sdk.CustomVariable:
    """A multi-value variable over fixed ``values``, with ``selected`` chosen."""
    return (
        sdk.CustomVariable(name)
        .label(label)
        .values(",".join(values))
        .multi(True)
        .current(VariableOption(text=" + ".join(selected), value=selected, selected=True))
    )


def sql_strings(values: Sequence[str]) -> str:
    """``values`` as SQL string literals, comma-separated (for ``IN (...)``)."""
    return ", ".join("'" + value.replace("'", "''") + "'" for value in values)


def repository_variable() -> sdk.QueryVariable:
    """The repository every other variable and panel filters on."""
    return variable(
        "repository", "Repository", "SELECT DISTINCT repository FROM report_series ORDER BY 1"
    )


def kernel_variable(*, multi: bool, source: str = "report_series") -> sdk.QueryVariable:
    """Kernels of the chosen repository in ``source`` (a view with ``repository`` and
    ``kernel``), each as ``__value``, labelled ``family / kernel`` as ``__text`` with the
    family its spec declares (``report_kernels``), or by its name alone when it has none."""
    return variable(
        "kernel",
        "Kernel",
        "SELECT DISTINCT CASE WHEN k.family <> '' THEN k.family || ' / ' || k.kernel "
        "ELSE k.kernel END AS __text, k.kernel AS __value FROM report_kernels k "
        f"WHERE k.repository = '$repository' AND k.kernel IN (SELECT kernel FROM {source} "
        "WHERE repository = '$repository') ORDER BY 1",
        multi=multi,
        include_all=multi,
    )


def gpu_variable(*, multi: bool) -> sdk.QueryVariable:
    """GPU models that measured the chosen repository."""
    return variable(
        "gpu",
        "GPU",
        "SELECT DISTINCT device_model FROM report_series WHERE repository = '$repository' "
        "ORDER BY 1",
        multi=multi,
        include_all=multi,
    )


def sql_panel(panel: Any, title: str, sql: str, *, w: int, h: int, format: Format = "table") -> Any:
    """``panel`` (an SDK panel builder) titled, sized and given one SQL target."""
    return (
        panel.title(title)
        .datasource(DATASOURCE)
        .with_target(Sql(sql, format=format))
        .span(w)
        .height(h)
    )


def table_panel(title: str, sql: str, *, w: int, h: int) -> table.Panel:
    """A table of the rows of ``sql``."""
    return sql_panel(table.Panel(), title, sql, w=w, h=h).filterable(True)


def timeseries_panel(title: str, sql: str, *, w: int, h: int, unit: str) -> timeseries.Panel:
    """Lines over time: ``sql`` returns ``time``, optionally a ``metric`` column naming the
    line, and numeric columns."""
    return sql_panel(timeseries.Panel(), title, sql, w=w, h=h, format="time_series").unit(unit)


def stat_panel(title: str, sql: str, *, w: int, h: int) -> stat.Panel:
    """Big numbers: each numeric column of ``sql``'s rows."""
    return sql_panel(stat.Panel(), title, sql, w=w, h=h)


def bar_panel(title: str, sql: str, *, w: int, h: int, unit: str) -> bargauge.Panel:
    """One bar per row of ``sql``: a label column and a value column."""
    return sql_panel(bargauge.Panel(), title, sql, w=w, h=h).unit(unit)


def row_values(limit: int | None = None) -> sdk_common.ReduceDataOptions:
    """Show every row's value (up to ``limit``) instead of reducing each column to one."""
    options = sdk_common.ReduceDataOptions().values(True).calcs([])
    return options if limit is None else options.limit(limit)


def matrix(row: str, column: str, value: str) -> DataTransformerConfig:
    """Grafana's "grouping to matrix": one row per ``row`` value, one column per
    ``column`` value, cells from ``value``."""
    return DataTransformerConfig(
        id_val="groupingToMatrix",
        options={"rowField": row, "columnField": column, "valueField": value},
    )


def cell_colors() -> list[DynamicConfigValue]:
    """Override properties that colour a table cell's background by its thresholds."""
    return [DynamicConfigValue(id_val="custom.cellOptions", value={"type": "color-background"})]


def unit(name: str) -> DynamicConfigValue:
    """An override property setting a field's unit (``percentunit``, ``ns``, ``d``...)."""
    return DynamicConfigValue(id_val="unit", value=name)


def thresholds(*steps: tuple[float | None, str]) -> sdk.ThresholdsConfig:
    """Absolute thresholds: ``(None, base colour)`` then ``(from value, colour)`` steps."""
    return (
        sdk.ThresholdsConfig()
        .mode(ThresholdsMode.ABSOLUTE)
        .steps([Threshold(value=value, color=color) for value, color in steps])
    )


def builds_link() -> sdk.DashboardLink:
    """A data link to the builds of a row's kernel around the row's time: where a static or
    correctness finding, which has no series, is looked into."""
    return (
        sdk.DashboardLink("Builds of this kernel around then")
        .type(DashboardLinkType.LINK)
        .url(links.builds_link_template())
    )


def history_links() -> list[sdk.DashboardLink]:
    """A data link on every row to its series' history around the row's time (the row has
    the columns ``links.HISTORY_VARIABLES`` and ``links.window_columns`` name)."""
    return [
        sdk.DashboardLink("History of this case around the change")
        .type(DashboardLinkType.LINK)
        .url(links.history_link_template())
    ]


def sql_annotation(name: str, sql: str, color: str) -> sdk.AnnotationQuery:
    """Marks on every time-series panel from ``sql``'s ``time``, ``text`` and ``tags``."""
    return (
        sdk.AnnotationQuery()
        .name(name)
        .datasource(DATASOURCE)
        .enable(True)
        .icon_color(color)
        # Grafana's SQL annotations take a query as their target; the SDK types the target
        # as the built-in annotation filter, so the SQL builder is passed in its place.
        .target(Sql(sql, ref_id="Anno"))  # type: ignore[arg-type]
    )


def sol_thresholds() -> sdk.ThresholdsConfig:
    """%SOL colours: red under 40, orange, yellow from 60, green from 80."""
    return thresholds((None, "red"), (40, "orange"), (60, "yellow"), (80, "green"))


def to_json(builder: sdk.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON, panels numbered from 1 in layout order."""
    model = builder.build()
    for number, panel in enumerate(model.panels or [], start=1):
        panel.id_val = number
    return json.loads(json.dumps(model, cls=JSONEncoder))
