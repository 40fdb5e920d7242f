"""A synthetic fleet's history as the harness's own records: GPU models x devices x series x
nightly runs (plus PR runs), with noisy samples, clocks, throttling and a 3 % step every 90
days; and the change points and regressions detection would write on it.

The store and dashboard benchmarks (``scripts/bench_store.py``, ``scripts/bench_dashboards.py``)
load it at scale (they put tests/ on their path); the store tests load small fleets of it.
It is test data, not part of the installed package. Kernel-time series for the detector
alone (no records, no store) are ``synthetic_series.py``'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import numpy as np
import psycopg

from kernelwatch.harness.distributed.bandwidth import bandwidth
from kernelwatch.harness.records import (
    CaseId,
    CommitInfo,
    DeviceInfo,
    LaunchConfig,
    Measurement,
    Method,
    RankInfo,
    RunInfo,
    SoftwareInfo,
    SpeedOfLight,
    Summary,
    Telemetry,
    WorldInfo,
)
from kernelwatch.store.runfile import Run

MODELS = (("NVIDIA H100 80GB HBM3", "9.0", 132), ("NVIDIA H200", "9.0", 132),
          ("NVIDIA B200", "10.0", 148))  # fmt: skip
# Built-in kernels' names, so each case's family is the one the built-in spec gives it.
KERNELS = ("rms_norm", "fused_add_rms_norm", "softmax", "silu_and_mul", "rope", "gemm",
           "flash_attention")  # fmt: skip
DTYPES = ("bf16", "fp16", "fp32")
DEVICES_PER_MODEL = 4
REPOSITORY = "github.com/example/llm-kernels"
SUITE = "kernelwatch.kernels.suite"
METHOD = Method("cuda-events", "cold", 1)
SOFTWARE = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.65")


@dataclass(frozen=True)
class Fleet:
    """The synthetic fleet's shape."""

    models: int = 3
    series: int = 2000
    days: int = 365
    samples: int = 30
    pr_runs_per_day: int = 2
    pr_series: int = 200
    seed: int = 0


def cases(count: int) -> list[CaseId]:
    """``count`` distinct cases spread over the suite's kernels and dtypes."""
    out = []
    for i in range(count):
        kernel = KERNELS[i % len(KERNELS)]
        dtype = DTYPES[(i // len(KERNELS)) % len(DTYPES)]
        j = i // (len(KERNELS) * len(DTYPES))
        params = {"tokens": 2 ** (j % 12), "hidden": 1024 * (1 + (j // 12) % 16), "batch": j}
        out.append(CaseId(SUITE, kernel, "llm", params, dtype))
    return out


def devices(model_index: int) -> list[DeviceInfo]:
    """The fleet's devices of one GPU model, two to a host."""
    name, capability, sms = MODELS[model_index]
    return [
        DeviceInfo("cuda", name, f"gpu-{model_index}-{d // 2}", False,
                   str(uuid.UUID(int=model_index * 100 + d + 1)), capability, sms)
        for d in range(DEVICES_PER_MODEL)
    ]  # fmt: skip


#: The stock library every synthetic case is compared with, named as a spec names it.
BASELINE = "torch.matmul (cuBLAS)"


def make_run(
    fleet: Fleet,
    rng: np.random.Generator,
    device: DeviceInfo,
    case_list: list[CaseId],
    base_ns: np.ndarray,
    started: datetime,
    trigger: str,
    commit: CommitInfo,
    base_commit: str | None = None,
) -> Run:
    """One run's records, as the timing harness would produce them."""
    n, k = len(case_list), fleet.samples
    noise = rng.lognormal(0.0, 0.01, size=(n, k))
    times = base_ns[:, None] * noise
    throttled = rng.random((n, k)) < 0.01
    clocks = np.where(throttled, 1400.0, 1980.0)
    baseline = base_ns[:, None] * 1.2 * rng.lognormal(0.0, 0.01, size=(n, k))
    sorted_times = np.sort(times, axis=1)
    median = np.median(times, axis=1)
    p10, p90 = np.percentile(times, [10, 90], axis=1)
    half = 1.58 * (p90 - p10) / 2.56 / np.sqrt(k)
    config = LaunchConfig({"BLOCK": 128}, 4, 2)
    info = RunInfo(
        str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | int(rng.integers(0, 2**63)))),
        trigger, REPOSITORY, SUITE, commit, device, SOFTWARE, started.isoformat(), "ok",
        (started + timedelta(minutes=40)).isoformat(), base_commit, "h100-pool", None,
    )  # fmt: skip
    telemetry = Telemetry(True, 1980.0, 2619.0, 61.0, 540.0, 0, 0)
    records = []
    for i, case in enumerate(case_list):
        summary = Summary(
            k, float(median[i]), float(median[i] - half[i]), float(median[i] + half[i]),
            float(times[i].mean()), float(sorted_times[i, 0]), float(p10[i]), float(p90[i]),
            "converged", float(half[i] / median[i]),
        )  # fmt: skip
        records.append(
            Measurement(
                case, "ok", "", METHOD, device, SOFTWARE, config,
                tuple(times[i].tolist()), tuple(clocks[i].tolist()),
                tuple(throttled[i].tolist()), summary, telemetry,
                SpeedOfLight(1e3 / median[i], 3e6 / median[i], 40.0, 70.0, 70.0, "memory",
                             "datasheet"),
                BASELINE, float(median[i] * 1.2), 1.2, 0.05, "",
                tuple(clocks[i].tolist()), tuple(baseline[i].tolist()),
                tuple(throttled[i].tolist()), "autotune",
            )
        )  # fmt: skip
    return Run(info, tuple(records))


def fleet_runs(fleet: Fleet, end: datetime) -> Iterator[Run]:
    """Every run of the fleet's history in time order: each day a nightly run per GPU model
    (on one of its devices, in turn) and some PR runs on a subset of the series."""
    rng = np.random.default_rng(fleet.seed)
    case_list = cases(fleet.series)
    base = {m: rng.uniform(5e3, 5e6, size=fleet.series) for m in range(fleet.models)}
    fleet_devices = {m: devices(m) for m in range(fleet.models)}
    start = end - timedelta(days=fleet.days)
    parent = "0" * 40
    for day in range(fleet.days):
        at = start + timedelta(days=day)
        sha = f"{day + 1:040x}"
        commit = CommitInfo(sha, (parent,), at.isoformat(), f"change {day}", "main")
        parent = sha
        for m in range(fleet.models):
            # a 3% step every 90 days, for the history charts to show something
            if day and day % 90 == 0:
                base[m][rng.integers(0, fleet.series, 20)] *= 1.03
            device = fleet_devices[m][day % DEVICES_PER_MODEL]
            yield make_run(fleet, rng, device, case_list, base[m], at + timedelta(hours=3),
                           "nightly", commit)  # fmt: skip
        for p in range(fleet.pr_runs_per_day):
            m = int(rng.integers(0, fleet.models))
            pick = rng.choice(fleet.series, size=min(fleet.pr_series, fleet.series), replace=False)
            pr_commit = CommitInfo(f"{day + 1:020x}{p + 1:020x}", (sha,), at.isoformat(),
                                   f"pr {day}/{p}", f"pr-{day}-{p}")  # fmt: skip
            yield make_run(fleet, rng, fleet_devices[m][p % DEVICES_PER_MODEL],
                           [case_list[i] for i in pick], base[m][pick],
                           at + timedelta(hours=12 + p), "pr", pr_commit, sha)  # fmt: skip


def add_regressions(conn: psycopg.Connection, count: int, seed: int, back: int = 1) -> None:
    """Change points and regressions as detection would write them, so the regression
    queries have rows to find (this benchmark has no detector of its own): ``count`` change
    points, each four under one regression (a last group of under four under none)."""
    conn.execute(
        """
        WITH picked AS (
            SELECT s.id AS series_id, m.id AS measurement_id, m.measured_at, r.commit_id,
                row_number() OVER () AS n
            FROM (SELECT id FROM series ORDER BY md5(id::text || %(seed)s) LIMIT %(count)s) s
            CROSS JOIN LATERAL (
                SELECT id, run_id, measured_at FROM measurements
                WHERE series_id = s.id AND history
                ORDER BY measured_at DESC, id DESC LIMIT 1 OFFSET %(back)s
            ) m JOIN runs r ON r.id = m.run_id
        ), groups AS (
            INSERT INTO regressions (repository_id, title, state, cause, magnitude,
                bad_commit_id, culprit_commit_id, created_at)
            SELECT (SELECT id FROM repositories LIMIT 1), 'synthetic regression ' || n,
                (ARRAY['untriaged','acknowledged','investigating','fixed','false_positive'])
                    [1 + n %% 5], 'code', 0.03, commit_id, commit_id, measured_at
            FROM picked WHERE n %% 4 = 0
            RETURNING id, title
        )
        INSERT INTO change_points (series_id, measurement_id, commit_id, at, detector,
            before_ns, after_ns, rel_change, direction, regression_id)
        SELECT p.series_id, p.measurement_id, p.commit_id, p.measured_at, 'synthetic',
            1.0, 1.03, 0.03, 'regression', g.id
        FROM picked p
            LEFT JOIN groups g ON g.title = 'synthetic regression ' || ((p.n + 3) / 4 * 4)""",
        {"count": count, "seed": str(seed), "back": back},
    )
    conn.commit()


#: The communication suite's repository (it sorts after REPOSITORY) and NVLink 4's per-GPU
#: unidirectional peak, which the seeded bus bandwidth approaches.
COMM_REPOSITORY = "github.com/example/moe-comm"
COMM_PEAK_GBPS = 450.0
COMM_SIZES = (8192, 1 << 20, 1 << 30)
COMM_WORLDS = (2, 8)


def comm_runs(end: datetime, days: int) -> list[Run]:
    """A multi-GPU node's nightlies of the communication suite over the last ``days``:
    NCCL all-reduce at 2 and 8 GPUs over three message sizes, the bus bandwidth growing with
    the size towards 80% of NVLink's peak (``0.8 * peak * S / (S + 1 MiB)``)."""
    name, capability, sms = MODELS[0]
    device = DeviceInfo("cuda", name, "hgx-0", False, "GPU-hgx-0", capability, sms)
    runs = []
    for day in range(days):
        at = end - timedelta(days=days - day)
        records = []
        for gpus in COMM_WORLDS:
            ranks = tuple(RankInfo(r, device.host, name, f"GPU-hgx-{r}") for r in range(gpus))
            world = WorldInfo("nccl", gpus, 1, "nvlink", ranks, "NV18", "2.27.3")
            for size in COMM_SIZES:
                busbw = COMM_PEAK_GBPS * 0.8 * size / (size + (1 << 20))
                time_ns = size * 2 * (gpus - 1) / gpus / busbw
                # As steady as the fleet's kernels, so the node is not quarantined as noisy.
                samples = (time_ns * 0.999, time_ns, time_ns * 1.001)
                summary = Summary(3, time_ns, samples[0], samples[2], time_ns, samples[0],
                                  samples[0], samples[2], "converged", 0.001)  # fmt: skip
                case = CaseId("comm", "all_reduce", "llm",
                              {"gpus_per_node": gpus, "bytes": size}, "bf16")  # fmt: skip
                records.append(Measurement(
                    case, "ok", "", METHOD, device, SOFTWARE, samples_ns=samples,
                    throttled=(False,) * 3, summary=summary, config_source="heuristic",
                    world=world,
                    bandwidth=bandwidth("all_reduce", size, gpus, time_ns, COMM_PEAK_GBPS),
                ))  # fmt: skip
        started = at + timedelta(hours=4)
        info = RunInfo(
            str(uuid.uuid5(uuid.NAMESPACE_URL, f"{COMM_REPOSITORY}/{day}")), "nightly",
            COMM_REPOSITORY, "comm", CommitInfo(f"{day:040x}", (), at.isoformat(), "", "main"),
            device, SOFTWARE, started.isoformat(), "ok",
            (started + timedelta(minutes=20)).isoformat(), None, "h100x8-pool", None,
        )  # fmt: skip
        runs.append(Run(info, tuple(records)))
    return runs
