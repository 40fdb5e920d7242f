"""Raw samples of measurements as binary-COPY rows for the ``samples`` table.

One row per measurement (see migration 0001 for the layout and ``views/raw_samples.sql``,
which decodes it): ``times_ns`` holds the kernel's samples then the baseline's as float4, and
``throttled`` their flags likewise as one bit string, split at ``n`` (the kernel's count);
SM and memory clocks are int2 MHz arrays, run-length compacted to a single element when
every sample read the same clock. Values are pulled out of the records once, into flat numpy
arrays, and rows of equal shape are framed together (``copyframe``), so the cost per sample
is a few nanoseconds of numpy rather than a Python call.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from kernelwatch.harness.records import Measurement
from kernelwatch.store import copyframe

COLUMNS = ("measurement_id", "n", "times_ns", "throttled", "sm_clock_mhz", "mem_clock_mhz")
_INT2_MAX = 32767


class _Flat:
    """One per-sample field of every record, laid end to end, with each record's slice."""

    def __init__(self, records: Sequence[Measurement], name: str, dtype: type) -> None:
        values = [getattr(m, name) for m in records]
        self.lengths = np.fromiter(map(len, values), np.int64, len(values))
        self.starts = np.concatenate(([0], np.cumsum(self.lengths)))
        self.data = np.fromiter(chain.from_iterable(values), dtype, int(self.starts[-1]))

    def per_record(self, hits: np.ndarray) -> np.ndarray:
        """How many elements of ``hits`` (one bool per element) fall in each record."""
        cumulative = np.concatenate(([0], np.cumsum(hits)))
        return cumulative[self.starts[1:]] - cumulative[self.starts[:-1]]

    def rows(self, index: np.ndarray, count: int) -> np.ndarray:
        """The first ``count`` elements of each record in ``index``, as a matrix."""
        return self.data[self.starts[index, None] + np.arange(count)]


class _Clock(_Flat):
    """A per-sample clock in MHz. ``stored`` is how many elements each record's int2 array
    holds: none, one (every sample read the same clock), or one per sample."""

    def __init__(self, records: Sequence[Measurement], name: str, n: np.ndarray) -> None:
        super().__init__(records, name, np.float64)
        v = self.data
        self.exact = self.per_record(~((v == np.rint(v)) & (v >= 0) & (v <= _INT2_MAX))) == 0
        self.exact &= (self.lengths == 0) | (self.lengths == n)
        first = v[np.repeat(self.starts[:-1], self.lengths)]
        constant = self.per_record(v != first) == 0
        self.stored = np.where(constant, np.minimum(self.lengths, 1), self.lengths)


class SampleBatch:
    """The samples of a run's measurements, ready to COPY.

    ``irregular_clocks`` and ``irregular_flags`` list the measurements (by position) whose
    clocks or flags the compact columns cannot hold exactly: a clock not in whole MHz within
    int2 range, or a clock or flag tuple not parallel to its samples (the harness writes
    neither). Their samples row leaves those arrays empty, and ingest keeps them exactly in
    the measurement's ``extra``.
    """

    def __init__(self, records: Sequence[Measurement]) -> None:
        self.kernel = _Flat(records, "samples_ns", np.float64)
        self.baseline = _Flat(records, "baseline_samples_ns", np.float64)
        self.flags = _Flat(records, "throttled", np.bool_)
        self.baseline_flags = _Flat(records, "baseline_throttled", np.bool_)
        n = self.kernel.lengths
        self.sm = _Clock(records, "sm_clock_mhz", n)
        self.mem = _Clock(records, "mem_clock_mhz", n)
        self._clocks_ok = self.sm.exact & self.mem.exact
        self._flags_ok = (self.flags.lengths == n) & (
            self.baseline_flags.lengths == self.baseline.lengths
        )
        self.irregular_clocks = set(np.flatnonzero(~self._clocks_ok).tolist())
        self.irregular_flags = set(np.flatnonzero(~self._flags_ok).tolist())
        self.count = int(n.sum() + self.baseline.lengths.sum())
        self.throttled_counts = self.flags.per_record(self.flags.data)

    def rows(self, ids: np.ndarray) -> bytes:
        """Binary COPY rows, one per measurement (``ids`` in record order)."""
        n, b = self.kernel.lengths, self.baseline.lengths
        sm = np.where(self._clocks_ok, self.sm.stored, 0)
        mem = np.where(self._clocks_ok, self.mem.stored, 0)
        shapes = np.stack([n, b, sm, mem, self._flags_ok])
        keys, groups = np.unique(shapes, axis=1, return_inverse=True)
        parts = []
        for g, (k, bk, smk, memk, flags) in enumerate(keys.T.tolist()):
            index = np.flatnonzero(groups.reshape(-1) == g)
            parts.append(self._frame(index, ids[index], k, bk, smk, memk, bool(flags)))
        return b"".join(parts)

    def _frame(
        self, index: np.ndarray, ids: np.ndarray, n: int, b: int, sm: int, mem: int, flags: bool
    ) -> bytes:
        times = np.hstack([self.kernel.rows(index, n), self.baseline.rows(index, b)])
        bits = (
            np.hstack([self.flags.rows(index, n), self.baseline_flags.rows(index, b)])
            if flags
            else np.zeros((len(index), 0), np.bool_)
        )
        fields = [
            ids.astype(">i8"),
            (">i4", n),
            copyframe.array(times, ">f4", copyframe.FLOAT4_OID),
            copyframe.bits(bits),
            copyframe.array(self.sm.rows(index, sm), ">i2", copyframe.INT2_OID),
            copyframe.array(self.mem.rows(index, mem), ">i2", copyframe.INT2_OID),
        ]
        return copyframe.frame(fields, len(index))
