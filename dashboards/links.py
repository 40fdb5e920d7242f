"""Links into the dashboards, one place for their paths and parameters: the data links of
the panels (Grafana expands their ``${__data.fields.x}`` templates per row) and the URLs the
flow's announcements carry."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import urlencode

HISTORY_UID = "kw-history"
BUILDS_UID = "kw-builds"
SERVING_UID = "kw-serving"
#: How much history a link to a change shows on either side of it.
AROUND = timedelta(days=14)
#: The kernel history's variables, in the order its URL gives them, and the columns of a
#: row that fill them.
HISTORY_VARIABLES = (
    ("repository", "repository"),
    ("kernel", "kernel"),
    ("dtype", "dtype"),
    ("gpu", "device_model"),
    ("case", "series_key"),
)


def history_url(
    base: str, values: dict[str, str], around: datetime | None = None, *, panel: int | None = None
) -> str:
    """The kernel history of one series (``values`` by column name, as in
    :data:`HISTORY_VARIABLES`), showing :data:`AROUND` either side of ``around``."""
    query = [(f"var-{name}", values[column]) for name, column in HISTORY_VARIABLES]
    if around is not None:
        query += [
            ("from", str(int((around - AROUND).timestamp() * 1000))),
            ("to", str(int((around + AROUND).timestamp() * 1000))),
        ]
    if panel is not None:
        query.append(("viewPanel", str(panel)))
    return f"{base.rstrip('/')}/d/{HISTORY_UID}/?{urlencode(query)}"


def window_columns(at: str) -> str:
    """SQL columns ``from_ms`` and ``to_ms``: :data:`AROUND` either side of the timestamp
    expression ``at``, for :func:`history_link_template`."""
    span = int(AROUND.total_seconds() * 1000)
    epoch_ms = f"(date_part('epoch', {at}) * 1000)::bigint"
    return f"{epoch_ms} - {span} AS from_ms, {epoch_ms} + {span} AS to_ms"


def builds_link_template() -> str:
    """A data link to the static build metrics of a row's kernel around the row's time (the
    row has ``repository``, ``kernel`` and the :func:`window_columns`)."""
    query = "&".join(
        f"var-{name}=${{__data.fields.{name}:percentencode}}" for name in ("repository", "kernel")
    )
    return f"/d/{BUILDS_UID}/?{query}&from=${{__data.fields.from_ms}}&to=${{__data.fields.to_ms}}"


def history_link_template() -> str:
    """A data link to the history of a row's series, as Grafana expands it per row: the row
    has the columns of :data:`HISTORY_VARIABLES` and :func:`window_columns`."""
    query = "&".join(
        f"var-{name}=${{__data.fields.{column}:percentencode}}"
        for name, column in HISTORY_VARIABLES
    )
    return f"/d/{HISTORY_UID}/?{query}&from=${{__data.fields.from_ms}}&to=${{__data.fields.to_ms}}"


def serving_link_template() -> str:
    """A data link to a row's deployment on the serving dashboard around the row's time (the
    row has ``deployment`` and the :func:`window_columns`)."""
    return (
        f"/d/{SERVING_UID}/?var-deployment=${{__data.fields.deployment:percentencode}}"
        "&from=${__data.fields.from_ms}&to=${__data.fields.to_ms}"
    )
