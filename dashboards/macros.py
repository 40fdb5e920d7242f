"""Expand a panel's SQL the way Grafana does before PostgreSQL sees it, so that the queries
of the dashboards and alert rules can be run and timed without a Grafana server.

Three passes, in Grafana's order:

1. Template variables (the browser, ``templateSrv.replace`` with the SQL data source's
   ``interpolateVariable``): ``$var``, ``${var}``, ``[[var]]`` and ``${var:format}``. With no
   format, a variable that is multi-value or has "All" gives each value single-quoted with
   ``'`` doubled, joined by commas; any other variable gives its value with ``'`` doubled
   and no quotes. ``sqlstring`` always quotes, ``raw`` and ``csv`` never do. ``$__interval``
   and ``$__interval_ms`` are variables of the panel's request.
2. Grafana's server-side globals (``sqleng.Interpolate``): ``$__interval_ms``,
   ``$__interval``, ``$__unixEpochFrom()``, ``$__unixEpochTo()``.
3. The PostgreSQL macro engine (``pkg/tsdb/grafana-postgresql-datasource/macros.go``): every
   ``$__name(args)``, arguments split on commas. ``$__timeFilter(c)`` is
   ``c BETWEEN 'from' AND 'to'`` with both ends as UTC RFC 3339 (nanosecond precision, trailing
   zeros dropped); ``$__timeGroup(c, '1h')`` is ``floor(extract(epoch from c)/3600)*3600``, and
   becomes the ``...Alias`` form (``AS "time"``) when a comma follows it, as Grafana keeps
   for dashboards older than 5.3.

A macro or variable this module does not know raises :class:`ExpansionError`, as Grafana
would answer an unknown macro with an error: a query that expands here runs there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import quote

_MACRO = re.compile(r"\$([_a-zA-Z0-9]+)\(([^\)]*)\)")
# Grafana's templateSrv pattern: $var, [[var]] / [[var:fmt]], ${var} / ${var:fmt}.
_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^\}]+))?\}")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
    "y": timedelta(days=365),
}
_INTERVAL = re.compile(r"^(\d+)(ms|s|m|h|d|w|y)$")
_FILL = re.compile(r"^(NULL|previous|-?\d+(\.\d+)?)$")


_FIELD = re.compile(r"\$\{__data\.fields\.(\w+)(?::(\w+))?\}")


class ExpansionError(ValueError):
    """The SQL uses a macro, variable or argument Grafana would reject."""


@dataclass(frozen=True)
class Variable:
    """A template variable's current selection. ``multi`` or ``include_all`` variables are
    quoted as lists even with one value selected, as Grafana's SQL data sources do."""

    values: tuple[str, ...]
    multi: bool = False
    include_all: bool = False

    @classmethod
    def single(cls, value: str) -> Variable:
        return cls((value,))


@dataclass(frozen=True)
class Request:
    """What a panel's query request carries: the time range and the interval Grafana picked
    for it (``$__interval``)."""

    start: datetime
    end: datetime
    interval: timedelta = timedelta(hours=1)


def expand(sql: str, request: Request, variables: Mapping[str, Variable] | None = None) -> str:
    """``sql`` as PostgreSQL receives it from Grafana for ``request`` and ``variables``."""
    sql = _substitute_variables(sql, request, variables or {})
    sql = _substitute_globals(sql, request)
    return _substitute_macros(sql, request)


def expand_link(template: str, row: Mapping[str, object]) -> str:
    """A data link's URL as Grafana builds it for one clicked row: each
    ``${__data.fields.name}`` (optionally ``:percentencode`` or ``:raw``) replaced by the
    row's value of that field."""

    def replace(match: re.Match[str]) -> str:
        name, fmt = match.group(1), match.group(2)
        if name not in row:
            raise ExpansionError(f"the data link refers to missing field {name!r}")
        value = "" if row[name] is None else str(row[name])
        if fmt == "percentencode":
            return quote(value, safe="!'()*")  # JavaScript's encodeURIComponent
        if fmt in (None, "raw"):
            return value
        raise ExpansionError(f"unsupported data link format {fmt!r}")

    return _FIELD.sub(replace, template)


def rfc3339(moment: datetime) -> str:
    """Go's ``time.RFC3339Nano`` of ``moment`` in UTC: ``2018-04-12T18:00:00.5Z``."""
    utc = moment.astimezone(UTC)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def format_interval(interval: timedelta) -> str:
    """Grafana's ``gtime.FormatInterval``: the largest whole unit, e.g. ``1d``, ``30m``."""
    for unit in ("y", "d", "h", "m", "s", "ms"):
        if interval >= _UNITS[unit]:
            return f"{interval // _UNITS[unit]}{unit}"
    return "1ms"


def parse_interval(text: str) -> timedelta:
    """Grafana's ``gtime.ParseInterval`` for the units dashboards use (``ms`` to ``y``)."""
    match = _INTERVAL.match(text.strip().strip("'"))
    if not match:
        raise ExpansionError(f"cannot parse interval {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2)]


def _substitute_variables(sql: str, request: Request, variables: Mapping[str, Variable]) -> str:
    builtins = {
        "__interval": Variable.single(format_interval(request.interval)),
        "__interval_ms": Variable.single(str(request.interval // timedelta(milliseconds=1))),
    }

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(5)
        variable = variables.get(name) or builtins.get(name)
        if variable is None:
            if match.group(1) and name.startswith("__"):
                return match.group(0)  # a macro or server-side global: later passes
            raise ExpansionError(f"no value for template variable {name!r}")
        return _format(variable, fmt)

    return _VARIABLE.sub(replace, sql)


def _format(variable: Variable, fmt: str | None) -> str:
    values = variable.values
    if fmt is None:
        if variable.multi or variable.include_all:
            return ",".join(_quote(v) for v in values)
        return ",".join(v.replace("'", "''") for v in values)
    if fmt == "sqlstring":
        return ",".join(_quote(v) for v in values)
    if fmt in ("raw", "csv"):
        return ",".join(values)
    raise ExpansionError(f"unsupported variable format {fmt!r}")


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _substitute_globals(sql: str, request: Request) -> str:
    sql = sql.replace("$__interval_ms", str(request.interval // timedelta(milliseconds=1)))
    sql = sql.replace("$__interval", format_interval(request.interval))
    sql = sql.replace("$__unixEpochFrom()", str(int(request.start.timestamp())))
    return sql.replace("$__unixEpochTo()", str(int(request.end.timestamp())))


def _substitute_macros(sql: str, request: Request) -> str:
    def replace(match: re.Match[str]) -> str:
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",")]
        # Grafana looks for the first occurrence of the same text when deciding this.
        after = sql.find(match.group(0)) + len(match.group(0))
        if name == "__timeGroup" and sql[after : after + 1] == ",":
            name = "__timeGroupAlias"
        return _macro(name, args, request)

    return _MACRO.sub(replace, sql)


def _macro(name: str, args: Sequence[str], request: Request) -> str:
    column = args[0] if args and args[0] else None
    start, end = rfc3339(request.start), rfc3339(request.end)
    if name in ("__time", "__timeEpoch", "__timeFilter", "__unixEpochFilter") and not column:
        raise ExpansionError(f"missing time column argument for macro {name}")
    if name == "__time":
        return f'{column} AS "time"'
    if name == "__timeEpoch":
        return f'extract(epoch from {column}) as "time"'
    if name == "__timeFilter":
        return f"{column} BETWEEN '{start}' AND '{end}'"
    if name == "__timeFrom":
        return f"'{start}'"
    if name == "__timeTo":
        return f"'{end}'"
    if name == "__unixEpochFilter":
        return (
            f"{column} >= {int(request.start.timestamp())} AND "
            f"{column} <= {int(request.end.timestamp())}"
        )
    if name in ("__timeGroup", "__timeGroupAlias"):
        if len(args) < 2:
            raise ExpansionError(f"macro {name} needs time column and interval")
        if len(args) == 3 and not _FILL.match(args[2]):
            raise ExpansionError(f"macro {name}: bad fill value {args[2]!r}")
        seconds = _seconds(parse_interval(args[1]))
        group = f"floor(extract(epoch from {args[0]})/{seconds})*{seconds}"
        return group + (' AS "time"' if name == "__timeGroupAlias" else "")
    raise ExpansionError(f"unknown macro {name!r}")


def _seconds(interval: timedelta) -> str:
    # Go's %v of a float64: whole numbers print without a decimal point.
    seconds = interval.total_seconds()
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)
