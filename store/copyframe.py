"""PostgreSQL binary COPY data framed with numpy, a whole group of equally shaped rows at once.

A binary COPY row is a 2-byte field count, then per field a 4-byte length (-1 for NULL) and
the value's binary form (the COPY documentation, "Binary Format"). Rows whose fields all
have the same lengths share one numpy structured dtype, so framing a group of them is a few
vectorised assignments instead of a Python call per row or per value. Callers split their
rows into such groups (by NULL pattern, array lengths, text values) and join the groups'
bytes between ``HEADER`` and ``TRAILER``; row order in a COPY carries no meaning.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np

HEADER = b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
TRAILER = struct.pack(">h", -1)
FLOAT4_OID, INT2_OID = 700, 21

# One field of a group: an array with one value per row, a (dtype, value) constant shared by
# every row, or None for NULL.
Field = np.ndarray | tuple[np.dtype | str, Any] | None


def frame(fields: Sequence[Field], rows: int) -> bytes:
    """``rows`` COPY rows whose fields are ``fields``, as bytes."""
    layout: list[tuple[str, Any]] = [("count", ">i2")]
    values: list[tuple[str, Any]] = []
    lengths: list[int] = []
    for i, value in enumerate(fields):
        layout.append((f"l{i}", ">i4"))
        if value is None:
            lengths.append(-1)
            continue
        dtype, data = (value.dtype, value) if isinstance(value, np.ndarray) else value
        dtype = np.dtype(dtype)
        lengths.append(dtype.itemsize)
        if dtype.itemsize:
            layout.append((f"v{i}", dtype))
            values.append((f"v{i}", data))
    out = np.empty(rows, dtype=np.dtype(layout))
    out["count"] = len(fields)
    for i, length in enumerate(lengths):
        out[f"l{i}"] = length
    for name, data in values:
        out[name] = data
    return out.tobytes()


def text(value: str | None) -> Field:
    """A text field with the same value in every row."""
    return None if value is None else _constant(value.encode())


def jsonb(value: str | None) -> Field:
    """A jsonb field (JSON text) with the same value in every row."""
    return None if value is None else _constant(b"\x01" + value.encode())


def array(values: np.ndarray, element: str, oid: int) -> np.ndarray:
    """One-dimensional PostgreSQL arrays, one per row of ``values`` (rows x elements), in
    binary form: header, then a length word before every element."""
    rows, count = values.shape
    if count == 0:  # an empty array has no dimensions
        empty = np.empty(rows, np.dtype([(name, ">i4") for name in ("ndim", "flags", "oid")]))
        empty["ndim"], empty["flags"], empty["oid"] = 0, 0, oid
        return empty
    item = np.dtype([("length", ">i4"), ("value", element)])
    header = [(name, ">i4") for name in ("ndim", "flags", "oid", "dim", "lbound")]
    out = np.empty(rows, np.dtype([*header, ("items", item, count)]))
    out["ndim"], out["flags"], out["oid"], out["dim"], out["lbound"] = 1, 0, oid, count, 1
    out["items"]["length"] = item["value"].itemsize
    out["items"]["value"] = values
    return out


def bits(flags: np.ndarray) -> np.ndarray:
    """``bit varying`` values, one per row of ``flags`` (rows x bits, bool), in binary form:
    the bit count, then the bits packed most significant first."""
    rows, count = flags.shape
    packed = np.packbits(flags, axis=1)
    out = np.empty(rows, np.dtype([("count", ">i4"), ("bits", np.uint8, packed.shape[1])]))
    out["count"] = count
    out["bits"] = packed
    return out


def _constant(data: bytes) -> Field:
    return np.dtype(f"V{len(data)}"), np.void(data) if data else b""
