"""The columns ingest writes, each declared once: its name, its Postgres type, and where its
value comes from.

A column is ``read`` from the record (an attribute path such as ``summary.median_ns``; NULL
when a part on the way is absent), ``given`` by ingest (ids it resolved, run-level values,
counts, ``extra``; with the record fields it derives them from), or filled by the ``server``
(a serial id, a default). Ingest's COPY and INSERT column lists, the measurement row builder,
and which record fields land in a row's ``extra`` JSONB are all derived from these tables;
``tests/test_store_columns.py`` checks them against the migrated schema and the records.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, is_dataclass
from functools import cached_property
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from kernelwatch.harness.records import BuildMetrics, CorrectnessResult, Measurement, RunInfo


@dataclass(frozen=True)
class Column:
    """One stored column. ``type`` is spelled as ``information_schema.columns.data_type``
    spells it."""

    name: str
    type: str
    path: str | None = None  # the record attribute it is read from; None: not read directly
    reads: tuple[str, ...] = ()  # a given column: the record fields ingest derives it from
    written: bool = True  # False: the server fills it

    def value(self, record: Any) -> Any:
        """This column's value in ``record`` (a read column only)."""
        return attribute(record, self.path)


def read(name: str, type: str, path: str | None = None) -> Column:
    """A column read from the record at ``path`` (default: the column's name)."""
    return Column(name, type, path or name)


def given(name: str, type: str, *reads: str) -> Column:
    """A column whose value ingest supplies, derived from the record fields ``reads`` (none
    for run-level values)."""
    return Column(name, type, reads=reads)


def server(name: str, type: str) -> Column:
    """A column the server fills (serial id, default); ingest does not write it."""
    return Column(name, type, written=False)


def attribute(record: Any, path: str) -> Any:
    """The value at a dotted attribute ``path`` of ``record``; None when a part on the way
    is None."""
    value = record
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


@dataclass(frozen=True)
class Table:
    """A table ingest writes one row of per record, and how the record's fields are stored.

    Every field of ``record`` (and of a part of it that columns read piecewise, such as
    ``summary``) is read by a column, stored ``elsewhere`` (field -> where, or why not at
    all), or kept in each row's ``extra`` JSONB (``extra``, dotted paths)."""

    name: str
    record: type
    columns: tuple[Column, ...]
    elsewhere: dict[str, str]
    extra: tuple[str, ...] = ()

    @cached_property
    def written(self) -> tuple[Column, ...]:
        """The columns ingest writes, in declaration order."""
        return tuple(c for c in self.columns if c.written)

    @cached_property
    def undecided(self) -> tuple[str, ...]:
        """Record fields (dotted paths) neither read by a column, stored elsewhere, nor
        declared kept in ``extra``. Ingest keeps them in ``extra`` all the same, so nothing
        is lost, but each must be decided (``tests/test_store_columns.py``)."""
        return tuple(_leaves(self.record, self._stored | set(self.extra), ""))

    @cached_property
    def kept_in_extra(self) -> tuple[str, ...]:
        """The record fields (dotted paths) that go to each row's ``extra``."""
        return (*self.extra, *self.undecided)

    @cached_property
    def _stored(self) -> frozenset[str]:
        paths = {c.path for c in self.columns if c.path is not None}
        return frozenset({*paths, *(r for c in self.columns for r in c.reads), *self.elsewhere})


def _leaves(cls: type, decided: frozenset[str], prefix: str) -> list[str]:
    """Fields of ``cls`` (paths below ``prefix``) not in ``decided``, descending into a part
    that is decided field by field (some path below it is decided)."""
    hints = get_type_hints(cls)
    out = []
    for f in fields(cls):
        path = prefix + f.name
        if path in decided:
            continue
        part = _dataclass_of(hints[f.name])
        if part is not None and any(d.startswith(path + ".") for d in decided):
            out += _leaves(part, decided, path + ".")
        else:
            out.append(path)
    return out


def _dataclass_of(hint: Any) -> type | None:
    options = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
    return next((o for o in options if is_dataclass(o)), None)


#: The software fields that identify a run's environment (the ``environments`` table).
ENVIRONMENT = ("kernelwatch", "python", "torch", "triton", "cuda", "driver")
_RUN_DEVICE = "the run's device (runs.device_id); kept in extra when it differs"
_RUN_SOFTWARE = "the run's environment (runs.environment_id); kept in extra when it differs"
# A distributed case's ranks (GPU UUIDs, NCCL version and environment) and the ranks that
# failed; the fabric also goes to the series (series.fabric).
_DISTRIBUTED = ("world", "failed_ranks")
_SAMPLE_FIELDS = ("samples_ns", "baseline_samples_ns", "throttled", "baseline_throttled",
                  "sm_clock_mhz", "mem_clock_mhz")  # fmt: skip

MEASUREMENTS = Table(
    "measurements",
    Measurement,
    (
        given("id", "bigint"),
        given("run_id", "bigint"),
        given("series_id", "integer", "case", "method", "device", "world"),
        given("measured_at", "timestamp with time zone"),
        given("history", "boolean"),
        given("config_id", "integer", "config"),
        read("n", "integer", "summary.n"),
        read("median_ns", "double precision", "summary.median_ns"),
        read("ci_low_ns", "double precision", "summary.ci_low_ns"),
        read("ci_high_ns", "double precision", "summary.ci_high_ns"),
        read("mean_ns", "double precision", "summary.mean_ns"),
        read("min_ns", "double precision", "summary.min_ns"),
        read("p10_ns", "double precision", "summary.p10_ns"),
        read("p90_ns", "double precision", "summary.p90_ns"),
        read("rel_ci_halfwidth", "double precision", "summary.rel_ci_halfwidth"),
        read("tflops", "double precision", "sol.tflops"),
        read("gbps", "double precision", "sol.gbps"),
        read("pct_compute", "double precision", "sol.pct_compute"),
        read("pct_memory", "double precision", "sol.pct_memory"),
        read("pct_sol", "double precision", "sol.pct_sol"),
        read("message_bytes", "bigint", "bandwidth.message_bytes"),
        read("algbw_gbps", "double precision", "bandwidth.algbw_gbps"),
        read("busbw_gbps", "double precision", "bandwidth.busbw_gbps"),
        read("busbw_peak_gbps", "double precision", "bandwidth.peak_gbps"),
        read("baseline_median_ns", "double precision"),
        read("speedup", "double precision"),
        given("sample_count", "integer", "samples_ns"),
        given("throttled_count", "integer", "throttled"),
        read("sm_clock_mhz", "double precision", "telemetry.sm_clock_mhz"),
        read("mem_clock_mhz", "double precision", "telemetry.mem_clock_mhz"),
        read("temperature_c", "double precision", "telemetry.temperature_c"),
        read("power_w", "double precision", "telemetry.power_w"),
        read("throttle_reasons", "bigint", "telemetry.throttle_reasons"),
        read("other_processes", "integer", "telemetry.other_processes"),
        read("telemetry_available", "boolean", "telemetry.available"),
        read("duration_s", "double precision"),
        read("unjudged", "boolean"),
        read("status", "text"),
        read("stop", "text", "summary.stop"),
        read("bound", "text", "sol.bound"),
        read("peak_source", "text", "sol.peak_source"),
        read("baseline", "text"),
        read("config_source", "text"),
        read("reason", "text"),
        read("detail", "text"),
        given("extra", "jsonb"),
    ),
    {
        **dict.fromkeys(_SAMPLE_FIELDS, "the samples table (store/samples.py)"),
        "device": _RUN_DEVICE,
        "software": _RUN_SOFTWARE,
    },
    # build_identity: what the case ran on the GPU (analysis/build_identity.py), compared
    # between measurements, never filtered on alone.
    extra=(*_DISTRIBUTED, "bandwidth.collective", "bandwidth.bus_factor", "build_identity"),
)

CORRECTNESS = Table(
    "correctness_results",
    CorrectnessResult,
    (
        server("id", "bigint"),
        given("run_id", "bigint"),
        given("kernel_id", "integer", "case"),
        given("case_key", "text", "case"),
        read("workload", "text", "case.workload"),
        read("params", "jsonb", "case.params"),
        read("dtype", "text", "case.dtype"),
        read("verdict", "text"),
        read("reason", "text"),
        read("tolerance", "double precision"),
        read("seed", "bigint"),
        read("rel_error", "double precision"),
        read("max_abs_error", "double precision"),
        read("nonfinite", "bigint"),
        read("unwritten", "bigint"),
        read("deterministic", "boolean"),
        given("config_id", "integer", "config"),
        read("duration_s", "double precision"),
        read("detail", "text"),
        given("extra", "jsonb"),
    ),
    {"device": _RUN_DEVICE, "software": _RUN_SOFTWARE},
    extra=_DISTRIBUTED,
)

BUILDS = Table(
    "build_metrics",
    BuildMetrics,
    (
        server("id", "bigint"),
        given("run_id", "bigint"),
        given("kernel_id", "integer", "suite", "kernel", "family"),
        read("function", "text"),
        read("language", "text"),
        read("arch", "text"),
        read("dtype", "text"),
        read("workload", "text"),
        read("case_label", "text", "case"),
        read("launch_index", "integer"),
        given("config_id", "integer", "config"),
        read("status", "text"),
        read("reason", "text"),
        read("registers", "integer"),
        read("spill_store_bytes", "bigint"),
        read("spill_load_bytes", "bigint"),
        read("stack_bytes", "bigint"),
        read("shared_static_bytes", "bigint"),
        read("shared_dynamic_bytes", "bigint"),
        read("num_warps", "integer"),
        read("num_stages", "integer"),
        read("tensor_core", "text"),
        read("tma_loads", "integer"),
        read("global_load_bits", "integer"),
        read("local_loads", "integer"),
        read("local_stores", "integer"),
        read("instructions", "integer"),
        read("opcodes", "jsonb"),
        read("cubin_bytes", "bigint"),
        read("cubin_sha256", "text"),
        read("source_hash", "text"),
        read("compile_s", "double precision"),
        read("cached", "boolean"),
        read("toolchain", "jsonb"),
        read("detail", "text"),
        given("extra", "jsonb"),
    ),
    {},
    # The function's SASS hash: what a case's build identity compares (the cubin's changes
    # with its debug line table), not a column anyone filters on.
    ("sass_sha256",),
)

RUNS = Table(
    "runs",
    RunInfo,
    (
        server("id", "bigint"),
        read("run_id", "uuid"),
        read("trigger", "text"),
        given("repository_id", "integer", "repository"),
        read("suite", "text"),
        given("commit_id", "bigint", "commit"),
        read("base_sha", "text", "base_commit"),
        read("pool", "text"),
        given("device_id", "integer", "device"),
        given("environment_id", "integer", *(f"software.{f}" for f in ENVIRONMENT)),
        read("status", "text"),
        read("started_at", "timestamp with time zone"),
        read("finished_at", "timestamp with time zone"),
        read("orchestration_id", "text"),
        server("ingested_at", "timestamp with time zone"),
        # Counts over the run's records, so per-device reports never scan measurements.
        given("measurements", "integer"),
        given("measurement_errors", "integer"),
        given("samples", "bigint"),
        given("throttled_samples", "bigint"),
        given("mean_rel_ci", "double precision"),
        given("correctness", "integer"),
        given("correctness_failed", "integer"),
        given("builds", "integer"),
        given("extra", "jsonb"),
    ),
    {"stages": "the device_time table (store/device_time.py)"},
    # Which suite file and revision the run imported: its provenance, not its environment.
    extra=("software.suite_source",),
)

TABLES = (RUNS, MEASUREMENTS, CORRECTNESS, BUILDS)
