"""What reports and PR comments read: about whole runs, a run's header, its measurements
(with or without raw samples), correctness results and builds, the latest nightly run per
device, the open regressions a run's series belong to, and bisection steps; and named
queries over the reporting views (``report_*``, which Grafana's panels read with SQL of their
own): the HTML report reads a series' history and the open regressions through them, and
``scripts/bench_store.py`` times every one.

Run rows come back as typed records; builds come back as the harness's ``BuildMetrics``
records, so ``analysis.static_diff`` reads stored builds exactly as it reads fresh ones. The
view queries return a list of dicts, one per row, keyed by the view's columns.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

from kernelwatch.harness.records import (
    BuildMetrics,
    CommitInfo,
    DeviceInfo,
    LaunchConfig,
    SoftwareInfo,
)
from kernelwatch.store.triage_state import OPEN_SQL


class RunNotFound(LookupError):
    """No stored run matches a run id or commit."""


@dataclass(frozen=True)
class RunHeader:
    """One stored run: what ran, where, with which software, and its per-run counts."""

    run_id: str
    trigger: str
    repository: str
    suite: str
    commit: CommitInfo | None
    base_sha: str | None
    pool: str | None
    orchestration_id: str | None
    status: str
    started_at: datetime
    finished_at: datetime | None
    device: DeviceInfo
    software: SoftwareInfo
    measurements: int
    measurement_errors: int
    correctness: int
    correctness_failed: int
    builds: int

    @property
    def commit_sha(self) -> str | None:
        """The sha of the commit the run measured, if it names one."""
        return self.commit.sha if self.commit is not None else None


@dataclass(frozen=True)
class MeasurementRow:
    """One measurement of a run with its series' descriptors (no raw samples)."""

    measurement_id: int
    series_key: str
    suite: str
    kernel: str
    workload: str
    params: dict[str, Any]
    dtype: str
    method: str
    status: str
    reason: str
    n: int | None
    median_ns: float | None
    ci_low_ns: float | None
    ci_high_ns: float | None
    rel_ci_halfwidth: float | None
    stop: str | None
    tflops: float | None
    gbps: float | None
    pct_sol: float | None
    bound: str | None
    peak_source: str | None
    baseline: str | None
    baseline_median_ns: float | None
    speedup: float | None
    config: str | None
    config_source: str | None
    throttled_count: int

    @property
    def case_label(self) -> str:
        """The case parameters as compact text, e.g. ``rows=64 hidden=4096``."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass(frozen=True)
class MeasurementSamples:
    """The raw samples of one measurement, as ``analysis.shift_test.counted_samples`` reads
    them: ``throttled`` and ``sm_clock_mhz`` per sample, or empty when unknown."""

    status: str
    samples_ns: tuple[float, ...]
    throttled: tuple[bool, ...]
    sm_clock_mhz: tuple[float, ...]


@dataclass(frozen=True)
class CorrectnessRow:
    """One stored correctness verdict."""

    kernel: str
    workload: str
    params: dict[str, Any]
    dtype: str
    verdict: str
    reason: str
    rel_error: float | None
    tolerance: float

    @property
    def case_label(self) -> str:
        """The case parameters as compact text."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass(frozen=True)
class BisectStep:
    """One A/B probe of a bisection: ``probe_sha`` timed against ``good_sha``."""

    bisect_id: str
    step: int
    probe_sha: str
    good_sha: str
    verdict: str
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    samples: int
    gpu_seconds: float
    note: str
    at: datetime


_RUN = """
SELECT run.run_id::text, run.trigger, repo.name, run.suite,
    c.sha, c.parents, c.author_time, c.message, c.branch,
    run.base_sha, run.pool, run.orchestration_id, run.status, run.started_at, run.finished_at,
    d.kind, d.model, d.host, d.interpreter, d.uuid, d.arch, d.sm_count, d.l2_bytes,
    e.kernelwatch, e.python, e.torch, e.triton, e.cuda, e.driver,
    run.measurements, run.measurement_errors, run.correctness, run.correctness_failed,
    run.builds
FROM runs run
    JOIN repositories repo ON repo.id = run.repository_id
    JOIN devices d ON d.id = run.device_id
    JOIN environments e ON e.id = run.environment_id
    LEFT JOIN commits c ON c.id = run.commit_id"""

_MEASUREMENTS = """
SELECT m.id, s.key, k.suite, k.name, s.workload, s.params, s.dtype,
    s.timer || '/' || s.l2 || '/h' || s.harness_version,
    m.status, m.reason, m.n, m.median_ns, m.ci_low_ns, m.ci_high_ns, m.rel_ci_halfwidth,
    m.stop, m.tflops, m.gbps, m.pct_sol, m.bound, m.peak_source, m.baseline,
    m.baseline_median_ns, m.speedup, cfg.label, m.config_source, m.throttled_count
FROM measurements m
    JOIN runs run ON run.id = m.run_id
    JOIN series s ON s.id = m.series_id
    JOIN kernels k ON k.id = s.kernel_id
    LEFT JOIN configs cfg ON cfg.id = m.config_id
WHERE run.run_id = %s
ORDER BY k.name, s.dtype, s.workload, m.id"""

_SAMPLES = """
SELECT s.key, m.status, rs.samples_ns, rs.throttled::text, rs.sm_clock_mhz
FROM measurements m
    JOIN runs run ON run.id = m.run_id
    JOIN series s ON s.id = m.series_id
    LEFT JOIN raw_samples rs ON rs.measurement_id = m.id
WHERE run.run_id = %s"""

_CORRECTNESS = """
SELECT k.name, cr.workload, cr.params, cr.dtype, cr.verdict, cr.reason, cr.rel_error,
    cr.tolerance
FROM correctness_results cr
    JOIN runs run ON run.id = cr.run_id
    JOIN kernels k ON k.id = cr.kernel_id
WHERE run.run_id = %s
ORDER BY k.name, cr.dtype, cr.workload, cr.id"""

_BUILDS = """
SELECT k.suite, k.name, b.function, b.language, b.arch, cfg.config, b.status, b.reason,
    b.registers, b.spill_store_bytes, b.spill_load_bytes, b.stack_bytes,
    b.shared_static_bytes, b.shared_dynamic_bytes, b.num_warps, b.num_stages, b.tensor_core,
    b.tma_loads, b.global_load_bits, b.local_loads, b.local_stores, b.instructions,
    b.opcodes, b.cubin_bytes, b.cubin_sha256, b.source_hash, b.compile_s, b.cached,
    b.toolchain, b.detail, b.dtype, b.workload, b.case_label, b.launch_index
FROM build_metrics b
    JOIN runs run ON run.id = b.run_id
    JOIN kernels k ON k.id = b.kernel_id
    LEFT JOIN configs cfg ON cfg.id = b.config_id
WHERE run.run_id = %s
ORDER BY b.id"""

# A commit reference resolves to the latest run of the one commit it names; ``near`` (a run
# id) prefers runs on that run's device and from the same orchestration, which is how the
# base run of a PR check is found from its head run.
_RUNS_OF_COMMIT = """
SELECT run.run_id::text, c.sha
FROM runs run
    JOIN commits c ON c.id = run.commit_id
    LEFT JOIN runs near ON near.run_id = %(near)s::uuid
WHERE c.sha LIKE %(prefix)s || '%%'
ORDER BY (run.device_id = near.device_id) DESC NULLS LAST,
    (run.orchestration_id = near.orchestration_id) DESC NULLS LAST,
    (run.trigger = near.trigger) DESC NULLS LAST,
    run.started_at DESC, run.id DESC"""

_LATEST_RUNS = """
SELECT DISTINCT ON (run.device_id) run.run_id::text
FROM runs run JOIN repositories repo ON repo.id = run.repository_id
WHERE repo.name = %s AND run.trigger = %s
ORDER BY run.device_id, run.started_at DESC, run.id DESC"""

_REGRESSIONS_OF_RUN = f"""
SELECT DISTINCT g.id
FROM measurements m
    JOIN runs run ON run.id = m.run_id
    JOIN change_points cp ON cp.series_id = m.series_id AND cp.direction = 'regression'
    JOIN regressions g ON g.id = cp.regression_id AND g.state IN {OPEN_SQL}
WHERE run.run_id = %s
ORDER BY g.id"""

_BISECT_STEPS = """
SELECT b.bisect_id::text, b.step, probe.sha, good.sha, b.verdict, b.ratio, b.ci_low,
    b.ci_high, b.samples, b.gpu_seconds, b.note, b.at
FROM bisect_steps b
    JOIN commits probe ON probe.id = b.probe_commit_id
    JOIN commits good ON good.id = b.good_commit_id
WHERE b.regression_id = %s
ORDER BY b.at, b.bisect_id, b.step, b.id"""


def run_header(conn: psycopg.Connection, run_id: str) -> RunHeader:
    """The header of one stored run; :class:`RunNotFound` when no run has that id."""
    if not _is_uuid(run_id):
        raise RunNotFound(f"{run_id!r} is not a run id (a UUID)")
    row = conn.execute(_RUN + " WHERE run.run_id = %s", (run_id,)).fetchone()
    if row is None:
        raise RunNotFound(f"no stored run {run_id}")
    return _header(row)


def resolve_run(conn: psycopg.Connection, ref: str, near: str | None = None) -> str:
    """The run id ``ref`` names: a run UUID, or a commit sha or prefix of one (the latest run
    of that commit, preferring runs on the device and orchestration of run ``near``).
    :class:`RunNotFound` when nothing matches or a prefix names several commits."""
    if _is_uuid(ref):
        return run_header(conn, ref).run_id
    if not ref or any(ch not in "0123456789abcdef" for ch in ref.lower()):
        raise RunNotFound(f"{ref!r} is neither a run id nor a commit sha")
    rows = conn.execute(_RUNS_OF_COMMIT, {"prefix": ref.lower(), "near": near}).fetchall()
    commits = {sha for _, sha in rows}
    if not rows:
        raise RunNotFound(f"no stored run of a commit {ref!r}")
    if len(commits) > 1:
        raise RunNotFound(f"commit prefix {ref!r} names {len(commits)} stored commits; give more")
    return rows[0][0]


def latest_runs(conn: psycopg.Connection, repository: str, trigger: str) -> list[RunHeader]:
    """The latest run with ``trigger`` of ``repository`` on each device, by device model."""
    ids = [row[0] for row in conn.execute(_LATEST_RUNS, (repository, trigger))]
    headers = [run_header(conn, run_id) for run_id in ids]
    return sorted(headers, key=lambda h: (h.device.name, h.device.host, h.device.uuid or ""))


def repositories(conn: psycopg.Connection) -> list[str]:
    """Every stored repository's name."""
    return [row[0] for row in conn.execute("SELECT name FROM repositories ORDER BY name")]


def repro_at(conn: psycopg.Connection, series_key: str, sha: str) -> str | None:
    """The repro command of ``series_key``'s first point measured at commit ``sha``, if any."""
    found = conn.execute(
        "SELECT repro FROM report_history_points WHERE series_key = %s AND commit_sha = %s "
        "ORDER BY measured_at LIMIT 1",
        (series_key, sha),
    ).fetchone()
    return found[0] if found is not None else None


def run_measurements(conn: psycopg.Connection, run_id: str) -> list[MeasurementRow]:
    """Every measurement of a run, by kernel, dtype and workload."""
    return [MeasurementRow(*row) for row in conn.execute(_MEASUREMENTS, (run_id,))]


def run_samples(conn: psycopg.Connection, run_id: str) -> dict[str, MeasurementSamples]:
    """The raw samples of every measurement of a run, by series key."""
    found = {}
    for key, status, samples, throttled, clocks in conn.execute(_SAMPLES, (run_id,)):
        found[key] = MeasurementSamples(
            status=status,
            samples_ns=tuple(samples or ()),
            throttled=tuple(bit == "1" for bit in throttled or ""),
            sm_clock_mhz=tuple(float(c) for c in clocks or ()),
        )
    return found


def run_correctness(conn: psycopg.Connection, run_id: str) -> list[CorrectnessRow]:
    """Every correctness verdict of a run, by kernel, dtype and workload."""
    return [CorrectnessRow(*row) for row in conn.execute(_CORRECTNESS, (run_id,))]


def run_builds(conn: psycopg.Connection, run_id: str) -> list[BuildMetrics]:
    """The builds of a run as the harness's records, in the order they were stored."""
    return [_build(row) for row in conn.execute(_BUILDS, (run_id,))]


def regressions_of_run(conn: psycopg.Connection, run_id: str) -> list[int]:
    """Open regressions that one of the run's series has a change point in."""
    return [row[0] for row in conn.execute(_REGRESSIONS_OF_RUN, (run_id,))]


def bisect_steps(conn: psycopg.Connection, regression_id: int) -> list[BisectStep]:
    """Every bisection probe made for a regression, in the order made."""
    return [BisectStep(*row) for row in conn.execute(_BISECT_STEPS, (regression_id,))]


LATEST = """
SELECT * FROM report_latest
WHERE (%(repository)s::text IS NULL OR repository = %(repository)s)
  AND (%(device_model)s::text IS NULL OR device_model = %(device_model)s)
  AND (%(kernel)s::text IS NULL OR kernel = %(kernel)s)
  AND (%(dtype)s::text IS NULL OR dtype = %(dtype)s)
ORDER BY kernel, dtype, series_key"""

SERIES_HISTORY = """
SELECT * FROM report_series_history
WHERE series_key = %(series_key)s AND measured_at >= %(since)s
ORDER BY measured_at"""

OPEN_REGRESSIONS = """
SELECT * FROM report_open_regressions
WHERE (%(repository)s::text IS NULL OR repository = %(repository)s)
ORDER BY created_at DESC"""

REGRESSIONS = """
SELECT * FROM report_regressions
WHERE created_at >= %(since)s
  AND (%(repository)s::text IS NULL OR repository = %(repository)s)
ORDER BY created_at DESC"""

DEVICE_NOISE = """
SELECT device_id, model, uuid, host, sum(runs) AS runs, sum(measurements) AS measurements,
    sum(measurement_errors) AS measurement_errors, sum(samples) AS samples,
    sum(throttled_samples) AS throttled_samples,
    sum(throttled_samples)::float8 / NULLIF(sum(samples), 0) AS throttled_fraction,
    sum(mean_rel_ci * runs) / NULLIF(sum(runs), 0) AS mean_rel_ci
FROM report_device_noise
WHERE day >= date_trunc('day', %(since)s::timestamptz)
  AND (%(device_model)s::text IS NULL OR model = %(device_model)s)
GROUP BY device_id, model, uuid, host
ORDER BY model, host, uuid"""

RUN_COMPARISON = """
SELECT * FROM report_run_comparison WHERE run_id = %(run_id)s ORDER BY kernel, series_key"""

ANNOTATIONS = """
SELECT * FROM report_annotations
WHERE at >= %(since)s AND (%(series_key)s::text IS NULL OR series_key = %(series_key)s)
ORDER BY at"""


def latest(
    conn: psycopg.Connection,
    *,
    repository: str | None = None,
    device_model: str | None = None,
    kernel: str | None = None,
    dtype: str | None = None,
) -> list[dict[str, Any]]:
    """The latest value of every series matching the filters (None matches all)."""
    return _rows(conn, LATEST, repository=repository, device_model=device_model,
                 kernel=kernel, dtype=dtype)  # fmt: skip


def series_history(
    conn: psycopg.Connection, series_key: str, *, since: datetime
) -> list[dict[str, Any]]:
    """One series' history since ``since``, oldest first, with change points marked."""
    return _rows(conn, SERIES_HISTORY, series_key=series_key, since=since)


def open_regressions(
    conn: psycopg.Connection, *, repository: str | None = None
) -> list[dict[str, Any]]:
    """Regressions still untriaged, acknowledged or under investigation, newest first."""
    return _rows(conn, OPEN_REGRESSIONS, repository=repository)


def regressions(
    conn: psycopg.Connection, *, since: datetime, repository: str | None = None
) -> list[dict[str, Any]]:
    """Every regression opened since ``since``, in any state: "what regressed this year"."""
    return _rows(conn, REGRESSIONS, since=since, repository=repository)


def device_noise(
    conn: psycopg.Connection, *, since: datetime, device_model: str | None = None
) -> list[dict[str, Any]]:
    """Per device since ``since``: runs, errors, throttled fraction and the mean of the
    harness's relative CI half-widths."""
    return _rows(conn, DEVICE_NOISE, since=since, device_model=device_model)


def run_comparison(conn: psycopg.Connection, run_id: str) -> list[dict[str, Any]]:
    """Each measurement of one run (a PR or bisect run) beside its series' latest value."""
    return _rows(conn, RUN_COMPARISON, run_id=run_id)


def annotations(
    conn: psycopg.Connection, *, since: datetime, series_key: str | None = None
) -> list[dict[str, Any]]:
    """Annotations (baseline resets, method changes, notes) since ``since``."""
    return _rows(conn, ANNOTATIONS, since=since, series_key=series_key)


def _rows(conn: psycopg.Connection, sql: str, **params: Any) -> list[dict[str, Any]]:
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute(sql, params).fetchall()


def _header(row: tuple[Any, ...]) -> RunHeader:
    (run_id, trigger, repository, suite, sha, parents, author_time, message, branch,
     base_sha, pool, orchestration_id, status, started_at, finished_at,
     kind, model, host, interpreter, device_uuid, arch, sm_count, l2_bytes,
     kw, python, torch, triton, cuda, driver,
     measurements, errors, correctness, correctness_failed, builds) = row  # fmt: skip
    commit = None
    if sha is not None:
        when = author_time.isoformat() if author_time is not None else ""
        commit = CommitInfo(sha, tuple(parents), when, message, branch)
    return RunHeader(
        run_id=run_id,
        trigger=trigger,
        repository=repository,
        suite=suite,
        commit=commit,
        base_sha=base_sha,
        pool=pool,
        orchestration_id=orchestration_id,
        status=status,
        started_at=started_at,
        finished_at=finished_at,
        device=DeviceInfo(kind, model, host, interpreter, device_uuid, arch, sm_count, l2_bytes),
        software=SoftwareInfo(kw, python, torch, triton, cuda, driver),
        measurements=measurements,
        measurement_errors=errors,
        correctness=correctness,
        correctness_failed=correctness_failed,
        builds=builds,
    )


def _build(row: tuple[Any, ...]) -> BuildMetrics:
    (suite, kernel, function, language, arch, config, status, reason, registers,
     spill_store, spill_load, stack, shared_static, shared_dynamic, num_warps, num_stages,
     tensor_core, tma_loads, load_bits, local_loads, local_stores, instructions, opcodes,
     cubin_bytes, cubin_sha256, source_hash, compile_s, cached, toolchain, detail, dtype,
     workload, case, launch_index) = row  # fmt: skip
    return BuildMetrics(
        suite=suite,
        kernel=kernel,
        function=function,
        language=language,
        arch=arch,
        config=LaunchConfig.from_json(config) if config is not None else None,
        status=status,
        reason=reason,
        registers=registers,
        spill_store_bytes=spill_store,
        spill_load_bytes=spill_load,
        stack_bytes=stack,
        shared_static_bytes=shared_static,
        shared_dynamic_bytes=shared_dynamic,
        num_warps=num_warps,
        num_stages=num_stages,
        tensor_core=tensor_core,
        tma_loads=tma_loads,
        global_load_bits=load_bits,
        local_loads=local_loads,
        local_stores=local_stores,
        instructions=instructions,
        opcodes=opcodes,
        cubin_bytes=cubin_bytes,
        cubin_sha256=cubin_sha256,
        source_hash=source_hash,
        compile_s=compile_s,
        cached=cached,
        toolchain=toolchain,
        detail=detail,
        dtype=dtype,
        workload=workload,
        case=case,
        launch_index=launch_index,
    )


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
