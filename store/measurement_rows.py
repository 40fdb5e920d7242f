"""Measurement rows as binary-COPY data, built column by column.

Each column is pulled out of all records at once (``map(attrgetter)``, then one numpy
conversion) instead of a Python ``write_row`` call per measurement. Rows are then grouped by
their NULL pattern and their text values (status, reason, stop, ... and the ``extra`` JSON):
within a group every row has the same shape, so ``copyframe`` frames it in one go. A nightly
run typically makes one or two groups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from kernelwatch.harness.records import Measurement
from kernelwatch.store import copyframe
from kernelwatch.store.columns import MEASUREMENTS, Column

# Binary COPY forms of the fixed-width types; timestamptz is given as microseconds since
# 2000-01-01 UTC.
_BINARY = {"bigint": ">i8", "integer": ">i4", "double precision": ">f8", "boolean": "?",
           "timestamp with time zone": ">i8"}  # fmt: skip
# Variable-width types, last in every row: their values select the row's group.
_TEXT = {"text": copyframe.text, "jsonb": copyframe.jsonb}

_unframed = [c.name for c in MEASUREMENTS.written if c.type not in (*_BINARY, *_TEXT)]
if _unframed:
    raise TypeError(f"measurements columns {_unframed} have a type measurement_rows cannot frame")
_FIXED = tuple(c for c in MEASUREMENTS.written if c.type in _BINARY)
_TEXTS = tuple(c for c in MEASUREMENTS.written if c.type in _TEXT)
COLUMNS = tuple(c.name for c in (*_FIXED, *_TEXTS))
_FRAMERS = tuple(_TEXT[c.type] for c in _TEXTS)


def _by_part(columns: Sequence[Column]) -> dict[str, tuple[list[Column], list[Column]]]:
    """Read columns by the part of the record they are read from ("" for the record itself):
    its float8 columns (read together) and its others."""
    parts: dict[str, tuple[list[Column], list[Column]]] = {}
    for c in columns:
        if c.path is not None:
            floats, others = parts.setdefault(c.path.rpartition(".")[0], ([], []))
            (floats if _BINARY[c.type] == ">f8" else others).append(c)
    return parts


_FIXED_PARTS = _by_part(_FIXED)


class _Missing:
    """Stands for an absent part (summary, speed-of-light, telemetry): every field is None."""

    def __getattr__(self, name: str) -> None:
        return None


_MISSING = _Missing()


def rows(records: Sequence[Measurement], given: Mapping[str, Any]) -> bytes:
    """Binary COPY rows of ``records``, with the fields in ``COLUMNS`` order.

    ``given`` holds each given column's values (see ``columns.MEASUREMENTS``): an array
    parallel to the records (no NULLs), a list parallel to the records (None for NULL), or
    one value for every row."""
    parts = _Parts(records)
    fixed = _fixed_columns(parts, given)
    texts = list(zip(*[_text_values(c, parts, given) for c in _TEXTS], strict=True))
    parts_out = []
    for index, text_values in _groups(fixed, texts):
        fields: list[copyframe.Field] = []
        for _, dtype, values, null in fixed:
            if isinstance(values, np.ndarray):
                fields.append(None if null is not None and null[index[0]] else values[index])
            else:
                fields.append((dtype, values))
        fields += [framer(v) for framer, v in zip(_FRAMERS, text_values, strict=True)]
        parts_out.append(copyframe.frame(fields, len(index)))
    return b"".join(parts_out)


class _Parts:
    """The records and their parts that columns are read from, with ``_MISSING`` for an
    absent one."""

    def __init__(self, records: Sequence[Measurement]) -> None:
        self._parts: dict[str, list[Any]] = {"": list(records)}

    def __getitem__(self, path: str) -> list[Any]:
        if path not in self._parts:
            parent, _, name = path.rpartition(".")
            # A part is a dataclass (always true) or None.
            values = map(attrgetter(name), self[parent])
            self._parts[path] = [v or _MISSING for v in values]
        return self._parts[path]


# name, binary dtype, values (an array, or a constant), NULL mask (None: no NULLs)
_Column = tuple[str, str, Any, np.ndarray | None]


def _fixed_columns(parts: _Parts, given: Mapping[str, Any]) -> list[_Column]:
    columns: dict[str, _Column] = {}
    for part, (floats, others) in _FIXED_PARTS.items():
        objects = parts[part]
        columns.update((c[0], c) for c in _floats(objects, floats))
        for c in others:
            columns[c.name] = _column(c.name, _BINARY[c.type], _get(objects, _attr(c)))
    for c in _FIXED:
        if c.path is None:
            columns[c.name] = _given(c.name, _BINARY[c.type], given[c.name])
    return [columns[c.name] for c in _FIXED]


def _text_values(column: Column, parts: _Parts, given: Mapping[str, Any]) -> Sequence[Any]:
    if column.path is None:
        return given[column.name]
    return _get(parts[column.path.rpartition(".")[0]], _attr(column))


def _attr(column: Column) -> str:
    return column.path.rpartition(".")[2]


def _groups(
    fixed: list[_Column], texts: list[tuple]
) -> list[tuple[np.ndarray, tuple[str | None, ...]]]:
    """Rows of one shape: (their positions, their shared text values), per NULL pattern and
    text values."""
    distinct: dict[tuple, int] = {}
    codes = np.fromiter(
        (distinct.setdefault(t, len(distinct)) for t in texts), np.int64, len(texts)
    )
    key = codes << 32  # the NULL pattern below: fewer than 32 nullable columns
    nullable = [null for _, _, _, null in fixed if null is not None]
    for bit, null in enumerate(nullable):
        key |= null.astype(np.int64) << bit
    unique, inverse = np.unique(key, return_inverse=True)
    values = list(distinct)
    return [(np.flatnonzero(inverse == g), values[int(k) >> 32]) for g, k in enumerate(unique)]


def _get(objects: Sequence[Any], name: str) -> list[Any]:
    return list(map(attrgetter(name), objects))


def _floats(objects: Sequence[Any], columns: Sequence[Column]) -> list[_Column]:
    """Several float8 columns of the same objects in one pass: one C-level ``attrgetter`` of
    every name, one numpy conversion (None becomes NaN, then told apart from a real NaN)."""
    if not columns:
        return []
    values = list(map(attrgetter(*map(_attr, columns)), objects))
    if len(columns) == 1:  # attrgetter of one name gives the value, not a tuple
        values = [(v,) for v in values]
    data = np.array(values, dtype=np.float64).reshape(len(objects), len(columns))
    nan = np.isnan(data)
    out = []
    for j, column in enumerate(columns):
        null = None
        if nan[:, j].any():
            null = np.zeros(len(objects), np.bool_)
            rows = np.flatnonzero(nan[:, j])
            null[rows] = [values[i][j] is None for i in rows.tolist()]
        out.append((column.name, ">f8", data[:, j].astype(">f8"), null))
    return out


def _given(name: str, dtype: str, values: Any) -> _Column:
    """A given column: an array parallel to the records (no NULLs), a list parallel to them
    (None for NULL), or one value for every row."""
    if isinstance(values, np.ndarray):
        return name, dtype, values.astype(dtype), None
    if isinstance(values, list | tuple):
        return _column(name, dtype, values)
    return name, dtype, values, None


def _column(name: str, dtype: str, values: Sequence[Any]) -> _Column:
    """A nullable column: values as an array (NULLs as 0) and the NULL mask, if any."""
    if None not in values:
        return name, dtype, np.array(values, dtype=dtype), None
    null = np.fromiter((v is None for v in values), np.bool_, len(values))
    filled = [0 if v is None else v for v in values]
    return name, dtype, np.array(filled, dtype=dtype), null
