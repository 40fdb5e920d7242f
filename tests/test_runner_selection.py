"""How the kernel child turns a plan into cases and launch configs: the self-check's A/A
stage takes a few cases per kernel, and its bf16 check launches the pinned configs instead
of autotuning every config at smoke shapes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from factories import SOFTWARE

from kernelwatch.harness import correctness
from kernelwatch.harness.device import select_device
from kernelwatch.harness.isolation import kernel_child as runner
from kernelwatch.harness.records import LaunchConfig
from kernelwatch.harness.suite import SuiteRef, Task, load_suite, select_tasks, spread


@pytest.mark.parametrize(
    ("count", "taken"),
    [(0, [0, 1, 2, 3, 4, 5, 6]), (1, [3]), (2, [0, 6]), (3, [0, 3, 6]), (9, [0, 1, 2, 3, 4, 5, 6])],
)
def test_cases_are_spread_from_the_first_to_the_last(count, taken):
    assert spread(list(range(7)), count) == taken


def test_the_plan_takes_at_most_that_many_cases_of_each_kernel():
    suite = load_suite(SuiteRef())
    every = select_tasks(suite, ("gemm", "rms_norm"), "llm", ["bf16"])
    two = runner._select(
        {"kernels": ["gemm", "rms_norm"], "workload": "llm", "dtypes": ["bf16"],
         "cases_per_kernel": 2},
        [suite],
    )  # fmt: skip
    assert [t.kernel for t in two] == ["gemm", "gemm", "rms_norm", "rms_norm"]
    gemm = [t.params for t in every if t.kernel == "gemm"]
    assert [t.params for t in two if t.kernel == "gemm"] == [gemm[0], gemm[-1]]


@pytest.mark.parametrize("autotune", [True, False])
def test_a_check_without_autotuning_launches_the_pinned_config(monkeypatch, autotune):
    """On a device that can autotune, a check plan with ``autotune`` off hands check_case the
    spec's pinned config; with it on (the default), nothing, so the autotuner picks."""
    suite = load_suite(SuiteRef())
    gemm = suite.kernel("gemm")
    assert isinstance(gemm.pinned_config, LaunchConfig)
    given: list[object] = []
    monkeypatch.setattr(correctness, "check_case", lambda *args: given.append(args[-1]))
    device = replace(select_device(), can_autotune=True)
    plan = {"mode": "check", "seed": 0, "pins": {}, "autotune": autotune}
    check, _ = runner._case_runner(plan, [suite], device, [SOFTWARE], lambda event: None, None)
    assert check is not None
    check(Task("gemm", "smoke", dict(gemm.workloads["smoke"][0]), "fp32", 1e-3))
    assert given == [None if autotune else gemm.pinned_config]
