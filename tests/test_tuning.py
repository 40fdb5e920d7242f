"""The autotuned launch path, run on the CPU with a stand-in for Triton's GPU benchmark."""

from __future__ import annotations

import functools
import itertools

import pytest
import torch
import triton

from kernelwatch.harness.correctness import compare
from kernelwatch.kernels.attention import ATTENTION_TUNABLE, FLASH_ATTENTION
from kernelwatch.kernels.gemm import GEMM, GEMM_TUNABLE
from kernelwatch.kernels.tuning import Tunable


@pytest.fixture
def cpu_autotune(monkeypatch):
    """Make ``triton.autotune`` time with a fake clock on which each config benchmarked is
    faster than the one before, so the last config must win."""
    clock = itertools.count(1000, -1)

    def fake_bench(kernel_call, quantiles=None, **_):
        kernel_call()
        t = float(next(clock))
        return [t, t, t] if quantiles else t

    monkeypatch.setattr(triton, "autotune", functools.partial(triton.autotune, do_bench=fake_bench))
    tunables: tuple[Tunable, ...] = (GEMM_TUNABLE, ATTENTION_TUNABLE)
    for tunable in tunables:  # autotuners are built on first use: build them under the fake
        tunable.__dict__.pop("autotuner", None)
    yield
    for tunable in tunables:
        tunable.__dict__.pop("autotuner", None)


@pytest.mark.parametrize("spec", [GEMM, FLASH_ATTENTION], ids=lambda s: s.name)
def test_autotuned_launch_reports_the_config_it_chose(cpu_autotune, spec, device):
    params = spec.workloads["smoke"][1]
    gen = torch.Generator().manual_seed(3)
    inputs = spec.make_inputs(params, torch.float16, torch.device(device.torch_device), gen)
    reference = spec.reference({k: v.double() for k, v in inputs.items()}, params)

    first = spec.make_outputs(inputs, params)
    chosen = spec.launch(inputs, first, params, None)
    assert chosen == spec.configs[-1]
    again = spec.make_outputs(inputs, params)
    assert spec.launch(inputs, again, params, chosen) == chosen
    assert compare(first, again, reference, spec.tolerance["fp16"]).failures == ()
