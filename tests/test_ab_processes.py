"""A/B with base and head in separate processes (issue 29): a hostile head cannot reach the
base's process, so what it patches or burns at import changes none of the base's samples.

The suites are plain directories (no git needed) with one Triton kernel run by the
interpreter; each side's launch reports which process it ran in and whether it sees the
head's patch through its config's ``meta``, which the record keeps.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelwatch.analysis.verdict import compare_measurements
from kernelwatch.harness.isolation.ab_sides import run_ab
from kernelwatch.harness.isolation.supervise import ABRequest
from kernelwatch.harness.suite import SuiteRef
from kernelwatch.harness.timing.request import BenchOptions
from kernelwatch.harness.timing.sampling import BUDGET, Sample, StopRule, collect_blocks

KERNEL = textwrap.dedent(
    """
    import builtins
    import os
    import random

    import torch
    import triton
    import triton.language as tl

    from kernelwatch.harness.spec import Baseline, KernelSpec, LaunchConfig

    REPEAT = 1
    # One number per process, whichever suite imports first: the same for two suites in one
    # process, different for two processes (pids may repeat across PID namespaces).
    builtins.__dict__.setdefault("KW_PROCESS", random.getrandbits(48))


    @triton.jit
    def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(y_ptr + offs, 2.0 * x, mask=offs < n)


    def launch(t, o, p, cfg):
        for _ in range(REPEAT):
            scale_kernel[(triton.cdiv(int(p["n"]), 32),)](t["x"], o["y"], int(p["n"]), BLOCK=32)
        # What the process this launch ran in looks like, kept in the record's config.
        seen = int(getattr(builtins, "KW_HOSTILE", 0))
        cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
        meta = {"BLOCK": 32, "process": builtins.KW_PROCESS, "hostile": seen, "cpus": cpus}
        return LaunchConfig(meta, 4, 1)


    SPEC = KernelSpec(
        name="scale",
        summary="y = 2 x",
        make_inputs=lambda p, dtype, dev, gen: {
            "x": torch.randn(int(p["n"]), generator=gen, device=dev).to(dtype)
        },
        make_outputs=lambda t, p: {"y": torch.empty_like(t["x"])},
        launch=launch,
        reference=lambda t, p: {"y": 2.0 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2.0 * t["x"]}),
        workloads={"smoke": ({"n": 512},)},
        flops=lambda p: int(p["n"]),
        min_bytes=lambda p, e: 2 * e * int(p["n"]),
        dtypes=("fp32",),
    )
    """
)

SUITE = textwrap.dedent(
    """
    from kernelwatch.harness.spec import Suite
    from kwplant.scale import SPEC

    SUITE = Suite(name="plant", kernels=(SPEC,))
    """
)

#: What the hostile head adds to its kernel module, run at import: a process-global marker,
#: and Triton's launch path wrapped to burn twice a launch's own CPU time, except for the
#: head's own launches: in a process shared with the base only the base's samples pay.
HOSTILE = textwrap.dedent(
    """
    import dataclasses
    import time

    from triton.runtime import interpreter

    builtins.KW_HOSTILE = 1
    builtins.KW_RUNNING = False
    _real = interpreter.GridExecutor.__call__


    def _slowed(self, *args, **kwargs):
        start = time.process_time()
        out = _real(self, *args, **kwargs)
        if not builtins.KW_RUNNING:
            end = time.process_time() + 2 * (time.process_time() - start)
            while time.process_time() < end:
                pass
        return out


    def _own(launch):
        def spared(*args):
            builtins.KW_RUNNING = True
            try:
                return launch(*args)
            finally:
                builtins.KW_RUNNING = False

        return spared


    interpreter.GridExecutor.__call__ = _slowed
    SPEC = dataclasses.replace(SPEC, launch=_own(SPEC.launch))
    """
)

# The runner is under test, not the timer: the child's own CPU time keeps the margins on a
# loaded machine (docs/TIMING.md, cpu-process-time).
FAST = BenchOptions(
    timer="cpu-process-time", min_samples=12, min_time_s=0.0, budget_s=0.6, target_rel_ci=0.001
)


#: Two cases, the first of which kills the process; the import takes ``SLOW_START`` seconds.
DIES_FIRST = textwrap.dedent(
    """
    import dataclasses
    import time


    def _dies_on_one(launch):
        def launched(t, o, p, cfg):
            if int(p["n"]) == 1 and DIES:
                os._exit(3)
            return launch(t, o, p, cfg)

        return launched


    time.sleep(SLOW_START)
    SPEC = dataclasses.replace(SPEC, launch=_dies_on_one(SPEC.launch),
                               workloads={"smoke": ({"n": 1}, {"n": 512})})
    """
)


def _suite(root: Path, repeat: int = 1, hostile: bool = False, extra: str = "") -> SuiteRef:
    (root / "kwplant").mkdir(parents=True)
    (root / "kwplant" / "__init__.py").write_text("")
    body = KERNEL + f"REPEAT = {repeat}\n" + (HOSTILE if hostile else "") + extra
    (root / "kwplant" / "scale.py").write_text(body)
    (root / "kernelwatch_suite.py").write_text(SUITE)
    return SuiteRef("kernelwatch_suite.py", str(root))


@pytest.fixture(scope="module")
def suites(tmp_path_factory) -> dict[str, SuiteRef]:
    root = tmp_path_factory.mktemp("plant")
    root.chmod(0o755)  # the sandbox user imports these directories
    return {
        "good": _suite(root / "good"),
        "slow": _suite(root / "slow", repeat=3),
        "hostile": _suite(root / "hostile", repeat=3, hostile=True),
    }


def _pair(a: SuiteRef, b: SuiteRef):
    (record,) = run_ab(ABRequest(suite=a, suite_b=b, options=FAST, case_timeout_s=120))
    assert record.status == "ok", (record.reason, record.detail)
    return record


def test_base_and_head_run_in_processes_of_their_own(suites):
    pair = _pair(suites["good"], suites["slow"])
    base, head = pair.base.config.meta, pair.head.config.meta
    assert base["process"] != head["process"]
    # On one CPU, both: two CPUs of one host differ in speed, which would read as a change.
    assert base["cpus"] == head["cpus"] and "," not in base["cpus"]
    assert len(pair.base.samples_ns) == len(pair.head.samples_ns) >= 12


def test_a_hostile_head_cannot_reach_the_bases_process(suites):
    """The head does 3x the work and slows every launch but its own: a base in its process
    read 3x slower and the pair "no regression" (0.9x); in a process of its own the base
    does not see the patch and the head reads SLOWER by its 3x. (The base's median is not
    compared with another run's: this machine's load moves even CPU time by 1.5x between
    runs, while the pair's ratio, its sides interleaved, holds.)"""
    pair = _pair(suites["good"], suites["hostile"])
    assert pair.base.config.meta["hostile"] == 0  # the head's patch is not in the base's process
    assert pair.head.config.meta["hostile"] == 1
    assert pair.base.config.meta["process"] != pair.head.config.meta["process"]
    verdict = compare_measurements(pair.base, pair.head)
    assert verdict.verdict == "SLOWER" and verdict.ratio > 2.0, verdict.reason


def test_a_sides_restart_does_not_spend_the_next_cases_time_limit(tmp_path):
    """B dies in the first case and takes longer than the case limit to start again: the
    next case gets its whole limit after the restart (it used to be counted from before the
    restart, and on a loaded machine a case after a hang timed out)."""
    tmp_path.chmod(0o755)
    base = _suite(tmp_path / "a", extra="DIES = False\nSLOW_START = 0\n" + DIES_FIRST)
    head = _suite(tmp_path / "b", extra="DIES = True\nSLOW_START = 4\n" + DIES_FIRST)
    request = ABRequest(suite=base, suite_b=head, options=FAST, case_timeout_s=4.0)
    died, measured = run_ab(request)
    assert died.status == "error" and died.reason == "B: exited with code 3", died.reason
    assert measured.status == "ok", (measured.reason, measured.detail)
    assert dict(measured.case.params) == {"n": 512}


def test_the_sides_blocks_alternate_under_one_stopping_rule():
    """The parent's loop: A's block, B's block, A's ... the same count each, the blocks
    growing towards the block length once a sample's cost is known."""
    now = [0.0]
    log: list[tuple[str, int]] = []

    def arm(name: str, ns: float):
        def take(n: int) -> list[Sample]:
            log.append((name, n))
            now[0] += n * 0.001  # a sample costs 1 ms of wall time
            return [Sample(ns + i % 7) for i in range(n)]

        return take

    rule = StopRule(min_samples=10, min_time_s=0.0, target_rel_ci=0.0, budget_s=0.2,
                    timeout_s=1.0, throttle_pause_s=0.0)  # fmt: skip
    collected = collect_blocks([arm("A", 100.0), arm("B", 300.0)], rule, lambda: now[0],
                               block_s=0.01)  # fmt: skip
    assert [name for name, _ in log] == ["A", "B"] * (len(log) // 2)
    assert [n for _, n in log[:4]] == [1, 1, 10, 10]
    assert len(collected.arms[0]) == len(collected.arms[1]) == sum(n for _, n in log) // 2
    assert collected.stop == BUDGET  # a zero target never converges
