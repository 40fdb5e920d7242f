"""Distributed cases end to end on the CPU: the built-in communication suite checked and
timed with gloo at world sizes 2 and 4 in a real kernel child, planted rank faults (a wrong
chunk, a hang, a crash) recorded against their case while the others still report, and the
nccl-tests bandwidth arithmetic."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kernelwatch.harness.distributed.bandwidth import bandwidth, bus_factor, interconnect_peak
from kernelwatch.harness.distributed.world import interconnect, nccl_env, parse_topology
from kernelwatch.harness.isolation.supervise import (
    BenchRequest,
    CheckRequest,
    run_benches,
    run_checks,
)
from kernelwatch.harness.records import RankInfo, WorldInfo, read_record
from kernelwatch.harness.spec import World
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.harness.timing.request import BenchOptions

COMM = SuiteRef("kernelwatch.kernels.collectives")
FAST = BenchOptions(min_samples=10, min_time_s=0.0, budget_s=0.2)
PLANTED = Path(__file__).parent / "planted" / "broken_ranks.py"


@pytest.fixture(scope="module")
def checks():
    return list(run_checks(CheckRequest(suite=COMM, dtypes=("fp32",), case_timeout_s=120)))


@pytest.fixture(scope="module")
def benches():
    request = BenchRequest(suite=COMM, dtypes=("fp32",), case_timeout_s=120, options=FAST)
    return list(run_benches(request))


def test_every_builtin_collective_passes_at_world_sizes_2_and_4(checks):
    worlds = {(r.case.kernel, World.of(r.case.params).size) for r in checks}
    for kernel in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
        assert {(kernel, 2), (kernel, 4)} <= worlds
    assert {("moe_dispatch_combine", 2), ("moe_dispatch_combine", 4)} <= worlds
    for record in checks:
        if record.case.kernel == "one_shot_all_reduce":  # symmetric memory needs CUDA GPUs
            assert record.verdict == "unsupported" and "symmetric memory" in record.reason
            continue
        assert record.verdict == "pass", (record.case, record.reason, record.detail)
        assert record.rel_error is not None and record.rel_error < 1e-6
        world = record.world
        assert world.backend == "gloo" and world.interconnect == "loopback"
        assert world.world_size == World.of(record.case.params).size == len(world.ranks)
        assert [r.rank for r in world.ranks] == list(range(world.world_size))
        assert read_record(record.to_json()) == record


def test_every_builtin_collective_is_timed_with_its_bus_bandwidth(benches):
    timed = [r for r in benches if r.case.kernel != "one_shot_all_reduce"]
    assert len(timed) == 14
    for record in timed:
        assert record.status == "ok", (record.case, record.reason, record.detail)
        assert record.summary.n >= 10 and record.method.timer == "cpu-perf-counter"
        moved = record.bandwidth
        n = record.world.world_size
        assert moved.bus_factor == bus_factor(moved.collective, n)
        assert moved.algbw_gbps == pytest.approx(moved.message_bytes / record.summary.median_ns)
        assert moved.busbw_gbps == pytest.approx(moved.algbw_gbps * moved.bus_factor)
        assert moved.peak_gbps is None  # loopback has no datasheet peak
        assert read_record(record.to_json()) == record
    sizes = {
        r.case.kernel: r.bandwidth.message_bytes for r in timed if r.case.params.get("bytes") == 264
    }
    # nccl-tests' S: the buffer (all-reduce), the whole gathered/scattered array, and one
    # rank's send buffer (all-to-all), in whole elements per rank (264 B = 66 fp32 = 2 x 33).
    assert sizes == {"all_reduce": 264, "all_gather": 264, "reduce_scatter": 264, "all_to_all": 264}


def test_a_rank_that_sends_the_wrong_chunk_hangs_or_crashes_costs_only_its_case():
    records = {
        r.case.kernel: r
        for r in run_checks(CheckRequest(suite=SuiteRef(str(PLANTED)), case_timeout_s=10))
    }
    assert list(records) == ["wrong_chunk", "hangs", "crashes", "healthy"]
    wrong, hung, crashed = records["wrong_chunk"], records["hangs"], records["crashes"]
    assert wrong.verdict == "fail" and "rank 0: 'out' relative error" in wrong.reason
    assert wrong.failed_ranks == (0, 1)  # both received rank 1's bad chunk
    assert hung.verdict == "error" and hung.failed_ranks == (1,)
    assert hung.reason.startswith("rank 1 (in launch) of 2 hung")
    assert "rank 0 gave up waiting" in hung.reason
    assert crashed.verdict == "error" and crashed.failed_ranks == (1,)
    assert crashed.reason == "rank 1 of 2 died of signal SIGSEGV during launch"
    assert "Fatal Python error" in crashed.detail  # the rank's own stderr tail
    assert records["healthy"].verdict == "pass", records["healthy"].reason


@pytest.mark.parametrize(
    ("collective", "factors"),
    [
        # nccl-tests doc/PERFORMANCE.md: busbw = algbw x factor, for n = 2, 4, 8 ranks.
        ("all_reduce", (1.0, 1.5, 1.75)),
        ("all_gather", (0.5, 0.75, 0.875)),
        ("reduce_scatter", (0.5, 0.75, 0.875)),
        ("all_to_all", (0.5, 0.75, 0.875)),
        ("broadcast", (1.0, 1.0, 1.0)),
        ("reduce", (1.0, 1.0, 1.0)),
    ],
)
def test_bus_factors_are_nccl_tests(collective, factors):
    assert tuple(bus_factor(collective, n) for n in (2, 4, 8)) == factors


def test_bandwidth_is_bytes_over_time_times_the_factor():
    # An 8-rank all-reduce of 1 GiB in 10 ms: algbw 107.37 GB/s, busbw 7/4 of it.
    moved = bandwidth("all_reduce", 1 << 30, 8, 10e6, 450.0)
    assert moved.algbw_gbps == pytest.approx(107.374182)
    assert moved.busbw_gbps == pytest.approx(187.904819)
    assert moved.peak_gbps == 450.0
    with pytest.raises(ValueError, match="unknown collective 'gather'"):
        bus_factor("gather", 2)


def test_interconnect_peaks():
    assert interconnect_peak("nvlink", "NVIDIA H100 80GB HBM3") == 450.0
    assert interconnect_peak("nvlink", "NVIDIA B200") == 900.0
    assert interconnect_peak("pcie", "NVIDIA H100 PCIe") == 64.0
    assert interconnect_peak("loopback", "AMD EPYC") is None
    assert interconnect_peak("nvlink+network", "NVIDIA H200") is None


TOPO = """\
\tGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tNV18\tSYS\tPIX\t0-55\t0\t\tN/A
GPU1\tNV18\t X \tNV18\tSYS\tPIX\t0-55\t0\t\tN/A
GPU2\tNV18\tNV18\t X \tSYS\tSYS\t56-111\t1\t\tN/A
GPU3\tSYS\tSYS\tSYS\t X \tSYS\t56-111\t1\t\tN/A

Legend:
  X    = Self
"""


def test_the_worst_link_between_the_ranks_gpus_is_read_from_topo():
    assert parse_topology(TOPO, range(3)) == "NV18"
    assert parse_topology(TOPO, range(4)) == "SYS"
    assert parse_topology(TOPO, [0]) == ""
    assert interconnect("nccl", "NV18", World(8)) == "nvlink"
    assert interconnect("nccl", "SYS", World(4)) == "pcie"
    assert interconnect("nccl", "NV18", World(8, nodes=2)) == "nvlink+network"
    assert interconnect("gloo", "", World(2)) == "loopback"


def test_the_fabric_names_interconnect_and_nccl_tuning_not_uuids_or_versions():
    env = {"NCCL_ALGO": "Ring", "NCCL_DEBUG": "INFO", "PATH": "/bin", "NCCL_PROTO": "LL128"}
    assert nccl_env(env) == {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL128"}

    def world(uuid: str, version: str) -> WorldInfo:
        ranks = (RankInfo(0, "h", "NVIDIA H100", uuid), RankInfo(1, "h", "NVIDIA H100", uuid))
        return WorldInfo("nccl", 2, 1, "nvlink", ranks, "NV18", version, nccl_env(env))

    assert world("a", "2.21.5").fabric() == "nvlink NCCL_ALGO=Ring NCCL_PROTO=LL128"
    assert world("a", "2.21.5").fabric() == world("b", "2.23.4").fabric()
    assert math.isclose(World(4, nodes=2).size, 8)


SUITE_AT = """
import torch
import torch.distributed as dist

from kernelwatch.harness.spec import DistributedSpec, Suite

REPEAT = {repeat}


def launch(t, o, p, comm):
    for _ in range(REPEAT):  # the head commit all-reduces four times: a planted slowdown
        o["out"].copy_(t["x"])
        dist.all_reduce(o["out"], group=comm.group)


SUITE = Suite(name="tp", kernels=(DistributedSpec(
    name="tp_all_reduce",
    summary="the tensor-parallel all-reduce of a team's layer",
    make_inputs=lambda p, dtype, dev, gen, rank: {{
        "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)}},
    make_outputs=lambda t, p: {{"out": torch.empty_like(t["x"])}},
    launch=launch,
    reference=lambda everyone, p, rank: {{"out": sum(t["x"] for t in everyone)}},
    collective="all_reduce",
    message_bytes=lambda p, elem: int(p["n"]) * elem,
    workloads={{"smoke": ({{"gpus_per_node": 2, "n": 4096}},)}},
    dtypes=("fp32",),
),))
"""


def test_a_pr_check_between_two_commits_gives_a_verdict_on_a_distributed_case(tmp_path):
    from gitrepo import git

    from kernelwatch.analysis.verdict import compare_measurements
    from kernelwatch.harness.isolation.ab_sides import run_ab
    from kernelwatch.harness.isolation.supervise import ABRequest
    from kernelwatch.harness.isolation.worktree import checkout

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    shas = []
    # Four times, not twice: timed by the wall clock of two ranks on two loaded cores, the
    # planted 2x read 1.5-3.6x under three CPU hogs, and AMBIGUOUS once in CI.
    for repeat in (1, 4):
        (repo / "tp_suite.py").write_text(SUITE_AT.format(repeat=repeat))
        git(repo, "add", ".")
        git(repo, "commit", "-qm", f"all-reduce x{repeat}")
        shas.append(git(repo, "rev-parse", "HEAD"))
    options = BenchOptions(min_samples=20, min_time_s=0.0, budget_s=2.0, target_rel_ci=0.001)
    with checkout(repo, shas[0]) as base, checkout(repo, shas[1]) as head:
        request = ABRequest(
            suite=SuiteRef("tp_suite.py", str(base.path)),
            suite_b=SuiteRef("tp_suite.py", str(head.path)),
            options=options,
            case_timeout_s=120,
        )
        (pair,) = run_ab(request)
    assert pair.status == "ok", (pair.reason, pair.detail)
    assert pair.base.world.world_size == pair.head.world.world_size == 2
    assert pair.head.bandwidth.busbw_gbps < pair.base.bandwidth.busbw_gbps
    verdict = compare_measurements(pair.base, pair.head)
    assert verdict.verdict == "SLOWER" and verdict.ratio > 2.0
