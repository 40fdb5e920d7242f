"""Measurement rows as binary-COPY data, built column by column.

Each column is pulled out of all records at once (``map(attrgetter)``, then one numpy
conversion) instead of a Python ``write_row`` call per measurement. Rows are then grouped by
their NULL pattern and their text values (status, reason, stop, ... and the ``extra`` JSON):
within a group every row has the same shape, so ``copyframe`` frames it in one go. A nightly
run typically makes one or two groups.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

from kernelwatch.harness.records import Measurement
from kernelwatch.store import copyframe

_SUMMARY_FLOATS = ("median_ns", "ci_low_ns", "ci_high_ns", "mean_ns", "min_ns", "p10_ns",
                   "p90_ns", "rel_ci_halfwidth")  # fmt: skip
_SOL_FLOATS = ("tflops", "gbps", "pct_compute", "pct_memory", "pct_sol")
_TELEMETRY_FLOATS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w")
_FIXED_COLUMNS = ("id", "run_id", "measured_at", "history", "series_id", "config_id", "n",
                  *_SUMMARY_FLOATS, *_SOL_FLOATS, *_TELEMETRY_FLOATS, "throttle_reasons",
                  "other_processes", "telemetry_available", "baseline_median_ns", "speedup",
                  "duration_s", "sample_count", "throttled_count")  # fmt: skip
# Text and jsonb columns, last in every row: their values select the row's group.
_TEXT_COLUMNS = ("stop", "bound", "peak_source", "baseline", "config_source", "status",
                 "reason", "detail", "extra")  # fmt: skip
COLUMNS = (*_FIXED_COLUMNS, *_TEXT_COLUMNS)


class _Missing:
    """Stands for an absent summary, speed-of-light or telemetry: every field is None."""

    def __getattr__(self, name: str) -> None:
        return None


_MISSING = _Missing()


@dataclass(frozen=True)
class RunColumns:
    """What the run gives every row, and what ingest resolved per record (parallel to the
    records)."""

    run_pk: int
    measured_at_us: int  # microseconds since 2000-01-01 UTC: timestamptz's binary form
    history: bool
    ids: np.ndarray
    series_ids: Sequence[int]
    config_ids: Sequence[int | None]
    sample_counts: np.ndarray
    throttled_counts: np.ndarray
    extras: Sequence[str | None]  # JSON text of each row's extra, or None


def rows(records: Sequence[Measurement], run: RunColumns) -> bytes:
    """Binary COPY rows of ``records``, with the fields in ``COLUMNS`` order."""
    parts = _Parts(records)
    fixed = _fixed_columns(parts, run)
    parts_out = []
    for index, text_values in _groups(fixed, _text_columns(parts, run.extras)):
        fields: list[copyframe.Field] = []
        for _, dtype, values, null in fixed:
            if isinstance(values, np.ndarray):
                fields.append(None if null is not None and null[index[0]] else values[index])
            else:
                fields.append((dtype, values))
        fields += [copyframe.text(v) for v in text_values[:-1]]
        fields.append(copyframe.jsonb(text_values[-1]))
        parts_out.append(copyframe.frame(fields, len(index)))
    return b"".join(parts_out)


class _Parts:
    """The records and their optional parts, with ``_MISSING`` for an absent one."""

    def __init__(self, records: Sequence[Measurement]) -> None:
        self.records = records
        self.summaries = [m.summary or _MISSING for m in records]
        self.sols = [m.sol or _MISSING for m in records]
        self.telemetry = [m.telemetry or _MISSING for m in records]


# name, binary dtype, values (an array, or a constant), NULL mask (None: no NULLs)
_Column = tuple[str, str, Any, np.ndarray | None]


def _fixed_columns(parts: _Parts, run: RunColumns) -> list[_Column]:
    columns = [
        ("id", ">i8", run.ids.astype(">i8"), None),
        ("run_id", ">i8", run.run_pk, None),
        ("measured_at", ">i8", run.measured_at_us, None),
        ("history", "?", run.history, None),
        _column("series_id", ">i4", run.series_ids),
        _column("config_id", ">i4", run.config_ids),
        _column("n", ">i4", _get(parts.summaries, "n")),
        *_floats(parts.summaries, _SUMMARY_FLOATS),
        *_floats(parts.sols, _SOL_FLOATS),
        *_floats(parts.telemetry, _TELEMETRY_FLOATS),
        _column("throttle_reasons", ">i8", _get(parts.telemetry, "throttle_reasons")),
        _column("other_processes", ">i4", _get(parts.telemetry, "other_processes")),
        _column("telemetry_available", "?", _get(parts.telemetry, "available")),
        *_floats(parts.records, ("baseline_median_ns", "speedup", "duration_s")),
        ("sample_count", ">i4", run.sample_counts.astype(">i4"), None),
        ("throttled_count", ">i4", run.throttled_counts.astype(">i4"), None),
    ]
    assert tuple(name for name, _, _, _ in columns) == _FIXED_COLUMNS
    return columns


def _text_columns(parts: _Parts, extras: Sequence[str | None]) -> list[tuple]:
    records, summaries, sols = parts.records, parts.summaries, parts.sols
    return list(zip(
        _get(summaries, "stop"), _get(sols, "bound"), _get(sols, "peak_source"),
        _get(records, "baseline"), _get(records, "config_source"), _get(records, "status"),
        _get(records, "reason"), _get(records, "detail"), extras, strict=True,
    ))  # fmt: skip


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


def _floats(objects: Sequence[Any], names: Sequence[str]) -> list[_Column]:
    """Several float8 columns of the same objects in one pass: one C-level ``attrgetter`` of
    every name, one numpy conversion (None becomes NaN, then told apart from a real NaN)."""
    values = list(map(attrgetter(*names), objects))
    data = np.array(values, dtype=np.float64).reshape(len(objects), len(names))
    nan = np.isnan(data)
    columns = []
    for j, name in enumerate(names):
        null = None
        if nan[:, j].any():
            null = np.zeros(len(objects), np.bool_)
            rows = np.flatnonzero(nan[:, j])
            null[rows] = [values[i][j] is None for i in rows.tolist()]
        columns.append((name, ">f8", data[:, j].astype(">f8"), null))
    return columns


def _column(name: str, dtype: str, values: Sequence[Any]) -> _Column:
    """A nullable column: values as an array (NULLs as 0) and the NULL mask, if any."""
    if None not in values:
        return name, dtype, np.array(values, dtype=dtype), None
    null = np.fromiter((v is None for v in values), np.bool_, len(values))
    filled = [0 if v is None else v for v in values]
    return name, dtype, np.array(filled, dtype=dtype), null
