"""A PostgreSQL query for Grafana panels, annotations and alert rules.

``grafana-foundation-sdk`` has no query type for Grafana's SQL data sources, so this is one:
a ``Dataquery`` variant whose JSON is what Grafana's PostgreSQL query editor saves in code
mode, and a builder that plugs into the SDK's ``with_target``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Self

from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.models.dashboard import DataSourceRef

#: The data source every kernelwatch query runs on (provisioned in infra/grafana).
DATASOURCE_UID = "kernelwatch-pg"
DATASOURCE_TYPE = "grafana-postgresql-datasource"
DATASOURCE = DataSourceRef(type_val=DATASOURCE_TYPE, uid=DATASOURCE_UID)

Format = Literal["table", "time_series"]


@dataclass
class SqlQuery(cogvariants.Dataquery):
    """One SQL query: ``format`` is ``table`` (rows as they come) or ``time_series`` (a
    ``time`` column, string columns naming the series)."""

    ref_id: str
    raw_sql: str
    format: Format = "table"

    def to_json(self) -> dict[str, object]:
        return {
            "refId": self.ref_id,
            "datasource": DATASOURCE.to_json(),
            "editorMode": "code",
            "format": self.format,
            "rawQuery": True,
            "rawSql": self.raw_sql,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Self:
        return cls(data.get("refId", ""), data.get("rawSql", ""), data.get("format", "table"))


class Sql(cogbuilder.Builder[SqlQuery]):
    """Builder of a :class:`SqlQuery`, for ``Panel.with_target`` and alert-rule models."""

    def __init__(self, raw_sql: str, *, ref_id: str = "A", format: Format = "table") -> None:
        self._query = SqlQuery(ref_id, raw_sql.strip(), format)

    def build(self) -> SqlQuery:
        return self._query


# Dashboards read back through the SDK (Dashboard.from_json) keep their SQL targets typed.
cogruntime.register_dataquery_variant(
    cogruntime.DataqueryConfig(identifier=DATASOURCE_TYPE, from_json_hook=SqlQuery.from_json)
)
