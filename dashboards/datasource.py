"""The Grafana data source the dashboards query: PostgreSQL, logged in as the store's
read-only role, described from a libpq URL for ``kernelwatch dashboards push``.
(infra/grafana/provisioning/datasources/kernelwatch.yaml is the same for file
provisioning.)"""

from __future__ import annotations

from typing import Any

import psycopg

from kernelwatch.dashboards.sqlquery import DATASOURCE_TYPE, DATASOURCE_UID

NAME = "kernelwatch"
#: The role migration 0002 creates; it may SELECT the reporting views (``store/views/``) only.
READER_ROLE = "kernelwatch_reader"


class DatasourceError(ValueError):
    """The URL cannot describe a Grafana data source."""


def from_url(url: str) -> dict[str, Any]:
    """The data source as ``POST /api/datasources`` takes it, from
    ``postgresql://kernelwatch_reader:PASSWORD@HOST:PORT/kernelwatch``."""
    try:
        info = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError as exc:
        raise DatasourceError(f"not a PostgreSQL URL: {url!r}") from exc
    missing = [key for key in ("host", "user", "dbname") if not info.get(key)]
    if missing:
        raise DatasourceError(f"the data source URL has no {', '.join(missing)}")
    if str(info["host"]).startswith("/"):
        raise DatasourceError("Grafana connects over TCP: give a host name, not a socket dir")
    return {
        "uid": DATASOURCE_UID,
        "name": NAME,
        "type": DATASOURCE_TYPE,
        "access": "proxy",
        "url": f"{info['host']}:{info.get('port') or 5432}",
        "user": info["user"],
        "jsonData": {
            "database": info["dbname"],
            "sslmode": info.get("sslmode") or "disable",
            "postgresVersion": 1500,
            "timescaledb": False,
        },
        "secureJsonData": {"password": str(info.get("password") or "")},
    }
