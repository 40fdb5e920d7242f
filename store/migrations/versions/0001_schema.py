"""Tables: repositories, commits, devices, environments, kernels, configs, series, runs,
measurements, samples (``store/views/raw_samples.sql`` decodes them), correctness, build metrics,
change points, regressions and their triage events, annotations.

There is no table of latest values: the last entry of a series in measurements_history_idx
is its latest value, found by one index descent, so ingest maintains nothing for it.

The fact tables (measurements, samples) carry no foreign keys: ingest is their only writer
and resolves every id in the same transaction, and the per-row constraint triggers would
cost more than the COPY itself. Every other table is fully constrained.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TRIAGE_STATES = (
    "untriaged",
    "acknowledged",
    "investigating",
    "fixed",
    "wont_fix",
    "false_positive",
    "hardware_issue",
)
_STATES_SQL = ", ".join(f"'{s}'" for s in TRIAGE_STATES)

UPGRADE = f"""
CREATE TABLE repositories (
    id          serial PRIMARY KEY,
    name        text NOT NULL UNIQUE
);

CREATE TABLE commits (
    id            bigserial PRIMARY KEY,
    repository_id int NOT NULL REFERENCES repositories(id),
    sha           text NOT NULL,
    parents       text[] NOT NULL DEFAULT '{{}}',
    author_time   timestamptz,
    message       text NOT NULL DEFAULT '',
    branch        text,
    UNIQUE (repository_id, sha)
);

CREATE TABLE devices (
    id           serial PRIMARY KEY,
    kind         text NOT NULL,
    model        text NOT NULL,
    host         text NOT NULL,
    uuid         text,
    arch         text,
    sm_count     int,
    l2_bytes     bigint,
    interpreter  boolean NOT NULL DEFAULT false,
    UNIQUE NULLS NOT DISTINCT (kind, model, host, uuid, arch, sm_count, l2_bytes, interpreter)
);

CREATE TABLE environments (
    id           serial PRIMARY KEY,
    kernelwatch  text NOT NULL,
    python       text NOT NULL,
    torch        text NOT NULL,
    triton       text NOT NULL,
    cuda         text,
    driver       text,
    UNIQUE NULLS NOT DISTINCT (kernelwatch, python, torch, triton, cuda, driver)
);

CREATE TABLE kernels (
    id            serial PRIMARY KEY,
    repository_id int NOT NULL REFERENCES repositories(id),
    suite         text NOT NULL,
    name          text NOT NULL,
    UNIQUE (repository_id, suite, name)
);

-- Launch/autotune configurations, stored once and referenced by id.
CREATE TABLE configs (
    id          serial PRIMARY KEY,
    label       text NOT NULL UNIQUE,
    config      jsonb NOT NULL
);

-- One line on a chart. key = hash of (repository, suite, kernel, canonical params, dtype,
-- device model, method); see kernelwatch.store.identity.
CREATE TABLE series (
    id               serial PRIMARY KEY,
    key              text NOT NULL UNIQUE,
    kernel_id        int NOT NULL REFERENCES kernels(id),
    case_key         text NOT NULL,
    workload         text NOT NULL,
    params           jsonb NOT NULL,
    dtype            text NOT NULL,
    device_model     text NOT NULL,
    timer            text NOT NULL,
    l2               text NOT NULL,
    harness_version  int NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX series_kernel_idx ON series (kernel_id, dtype, device_model);
CREATE INDEX series_case_idx ON series (case_key);

CREATE TABLE runs (
    id                 bigserial PRIMARY KEY,
    run_id             uuid NOT NULL UNIQUE,
    trigger            text NOT NULL CHECK (trigger IN ('nightly', 'pr', 'bisect', 'manual')),
    repository_id      int NOT NULL REFERENCES repositories(id),
    suite              text NOT NULL,
    commit_id          bigint REFERENCES commits(id),
    base_sha           text,
    pool               text,
    device_id          int NOT NULL REFERENCES devices(id),
    environment_id     int NOT NULL REFERENCES environments(id),
    status             text NOT NULL CHECK (status IN ('running', 'ok', 'partial', 'failed')),
    started_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    orchestration_id   text,
    ingested_at        timestamptz NOT NULL DEFAULT now(),
    -- Counts kept at ingest so per-device reports never scan measurements.
    measurements       int NOT NULL DEFAULT 0,
    measurement_errors int NOT NULL DEFAULT 0,
    samples            bigint NOT NULL DEFAULT 0,
    throttled_samples  bigint NOT NULL DEFAULT 0,
    mean_rel_ci        double precision,
    correctness        int NOT NULL DEFAULT 0,
    correctness_failed int NOT NULL DEFAULT 0,
    builds             int NOT NULL DEFAULT 0,
    extra              jsonb
);
CREATE INDEX runs_device_time_idx ON runs (device_id, started_at);
CREATE INDEX runs_time_idx ON runs (started_at);
CREATE INDEX runs_commit_idx ON runs (commit_id);

-- id = the run's id x 2^24 + the measurement's position in the run (MEASUREMENT_ID_SHIFT):
-- ingest needs no sequence round trip, and a run's measurements are one id range.
-- history: the run is on the tracked branch (nightly, manual), so this is a point of the
-- series' history line and a candidate for its latest value; PR and bisect runs are not.
CREATE TABLE measurements (
    id                  bigint PRIMARY KEY,
    run_id              bigint NOT NULL,
    series_id           int NOT NULL,
    measured_at         timestamptz NOT NULL,
    history             boolean NOT NULL,
    config_id           int,
    n                   int,
    median_ns           double precision,
    ci_low_ns           double precision,
    ci_high_ns          double precision,
    mean_ns             double precision,
    min_ns              double precision,
    p10_ns              double precision,
    p90_ns              double precision,
    rel_ci_halfwidth    double precision,
    tflops              double precision,
    gbps                double precision,
    pct_compute         double precision,
    pct_memory          double precision,
    pct_sol             double precision,
    baseline_median_ns  double precision,
    speedup             double precision,
    sample_count        int NOT NULL,
    throttled_count     int NOT NULL,
    sm_clock_mhz        double precision,
    mem_clock_mhz       double precision,
    temperature_c       double precision,
    power_w             double precision,
    throttle_reasons    bigint,
    other_processes     int,
    telemetry_available boolean,
    duration_s          double precision NOT NULL,
    status              text NOT NULL CHECK (status IN ('ok', 'unsupported', 'error')),
    stop                text,
    bound               text,
    peak_source         text,
    baseline            text,
    config_source       text,
    reason              text NOT NULL,
    detail              text NOT NULL,
    extra               jsonb
);
CREATE INDEX measurements_run_idx ON measurements (run_id);
-- A series' history and its latest value (the last entry): one descent of this index.
CREATE INDEX measurements_history_idx ON measurements (series_id, measured_at, id)
    WHERE history;

-- Raw samples, one row per measurement; read them through the raw_samples view. times_ns
-- holds the kernel's n samples then the baseline's, as float4 (24-bit mantissa: rounding
-- below 6e-8 relative, under any timer's resolution); throttled their flags in the same
-- order. Clocks are int2 MHz, as NVML reports them: one element per kernel sample, a single
-- element when every sample read the same clock, none when no clock was read. A measurement
-- whose clocks or flags these columns cannot hold exactly (see ingest) keeps them in
-- measurements.extra and empty here.
CREATE TABLE samples (
    measurement_id  bigint PRIMARY KEY,
    n               int NOT NULL,
    times_ns        real[] NOT NULL,
    throttled       bit varying NOT NULL,
    sm_clock_mhz    smallint[] NOT NULL,
    mem_clock_mhz   smallint[] NOT NULL
);

CREATE TABLE correctness_results (
    id             bigserial PRIMARY KEY,
    run_id         bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kernel_id      int NOT NULL REFERENCES kernels(id),
    case_key       text NOT NULL,
    workload       text NOT NULL,
    params         jsonb NOT NULL,
    dtype          text NOT NULL,
    verdict        text NOT NULL CHECK (verdict IN ('pass', 'fail', 'error', 'unsupported')),
    reason         text NOT NULL,
    tolerance      double precision NOT NULL,
    seed           bigint NOT NULL,
    rel_error      double precision,
    max_abs_error  double precision,
    nonfinite      bigint NOT NULL,
    unwritten      bigint NOT NULL,
    deterministic  boolean,
    config_id      int REFERENCES configs(id),
    duration_s     double precision NOT NULL,
    detail         text NOT NULL,
    extra          jsonb
);
CREATE INDEX correctness_run_idx ON correctness_results (run_id);
CREATE INDEX correctness_case_idx ON correctness_results (kernel_id, case_key);

CREATE TABLE build_metrics (
    id                   bigserial PRIMARY KEY,
    run_id               bigint NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kernel_id            int NOT NULL REFERENCES kernels(id),
    function             text NOT NULL,
    language             text NOT NULL,
    arch                 text NOT NULL,
    -- the specialisation a build stands for: dtype and the label of the first case of the
    -- workload that compiles to it
    dtype                text NOT NULL,
    workload             text NOT NULL,
    case_label           text NOT NULL,
    config_id            int REFERENCES configs(id),
    status               text NOT NULL CHECK (status IN ('ok', 'error')),
    reason               text NOT NULL,
    registers            int,
    spill_store_bytes    bigint,
    spill_load_bytes     bigint,
    stack_bytes          bigint,
    shared_static_bytes  bigint,
    shared_dynamic_bytes bigint,
    num_warps            int,
    num_stages           int,
    tensor_core          text,
    tma_loads            int,
    global_load_bits     int,
    local_loads          int,
    local_stores         int,
    instructions         int,
    opcodes              jsonb NOT NULL,
    cubin_bytes          bigint,
    cubin_sha256         text,
    source_hash          text,
    compile_s            double precision NOT NULL,
    cached               boolean NOT NULL,
    toolchain            jsonb NOT NULL,
    detail               text NOT NULL,
    extra                jsonb
);
CREATE INDEX build_run_idx ON build_metrics (run_id);
CREATE INDEX build_kernel_idx ON build_metrics (kernel_id, arch, function);

-- Written by regression detection (analysis + flows), one group per culprit.
CREATE TABLE regressions (
    id                 bigserial PRIMARY KEY,
    repository_id      int NOT NULL REFERENCES repositories(id),
    title              text NOT NULL,
    state              text NOT NULL DEFAULT 'untriaged' CHECK (state IN ({_STATES_SQL})),
    -- what moved: code, autotune (config flip), environment, or unknown
    cause              text NOT NULL DEFAULT 'unknown'
                       CHECK (cause IN ('code', 'autotune', 'environment', 'unknown')),
    magnitude          double precision,
    good_commit_id     bigint REFERENCES commits(id),
    bad_commit_id      bigint REFERENCES commits(id),
    culprit_commit_id  bigint REFERENCES commits(id),
    assignee           text,
    bug_url            text,
    notes              text NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    resolved_at        timestamptz
);
CREATE INDEX regressions_open_idx ON regressions (repository_id, created_at)
    WHERE state IN ('untriaged', 'acknowledged', 'investigating');
CREATE INDEX regressions_created_idx ON regressions (created_at);

CREATE TABLE regression_events (
    id             bigserial PRIMARY KEY,
    regression_id  bigint NOT NULL REFERENCES regressions(id) ON DELETE CASCADE,
    at             timestamptz NOT NULL DEFAULT now(),
    actor          text NOT NULL,
    state          text CHECK (state IN ({_STATES_SQL})),
    note           text NOT NULL DEFAULT ''
);
CREATE INDEX regression_events_idx ON regression_events (regression_id, at);

CREATE TABLE change_points (
    id              bigserial PRIMARY KEY,
    series_id       int NOT NULL REFERENCES series(id),
    measurement_id  bigint NOT NULL,
    commit_id       bigint REFERENCES commits(id),
    at              timestamptz NOT NULL,
    detector        text NOT NULL,
    before_ns       double precision NOT NULL,
    after_ns        double precision NOT NULL,
    rel_change      double precision NOT NULL,
    score           double precision,
    direction       text NOT NULL CHECK (direction IN ('regression', 'improvement')),
    regression_id   bigint REFERENCES regressions(id) ON DELETE SET NULL,
    detected_at     timestamptz NOT NULL DEFAULT now(),
    UNIQUE (series_id, measurement_id, detector)
);
CREATE INDEX change_points_series_idx ON change_points (series_id, at);
CREATE INDEX change_points_regression_idx ON change_points (regression_id);

-- Marks on the time axis: baseline resets (detection starts afresh after them), method
-- changes (written by ingest when a case gets a new series), notes, infrastructure events.
CREATE TABLE annotations (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL,
    kind           text NOT NULL
                   CHECK (kind IN ('baseline_reset', 'method_change', 'note', 'infrastructure')),
    text           text NOT NULL,
    repository_id  int REFERENCES repositories(id),
    series_id      int REFERENCES series(id),
    device_model   text,
    commit_id      bigint REFERENCES commits(id),
    author         text NOT NULL DEFAULT 'kernelwatch',
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX annotations_time_idx ON annotations (at);
CREATE INDEX annotations_series_idx ON annotations (series_id, at);
"""

TABLES = (
    "annotations",
    "change_points",
    "regression_events",
    "regressions",
    "build_metrics",
    "correctness_results",
    "samples",
    "measurements",
    "runs",
    "series",
    "configs",
    "kernels",
    "environments",
    "devices",
    "commits",
    "repositories",
)


def upgrade() -> None:
    op.execute(UPGRADE)


def downgrade() -> None:
    op.execute("".join(f"DROP TABLE {t};\n" for t in TABLES))
