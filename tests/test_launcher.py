"""How the harness launches a spec (``harness/launcher.py``): in-place outputs prepared
outside the launch with the elements to overwrite poisoned, and entry points whose Triton
launches are observed (issue 18). Real kernels in the interpreter, in this process."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from kernelwatch.harness import launcher
from kernelwatch.harness.correctness import check_case
from kernelwatch.harness.spec import Baseline, InPlace, KernelSpec, LaunchConfig

ROWS, WIDTH = 8, 4


@triton.jit
def _store_rows(cache_ptr, values_ptr, slots_ptr, n_written, WIDTH: tl.constexpr):
    """cache[slots[i], :] = values[i, :] for the first ``n_written`` of the rows."""
    i = tl.program_id(0)
    if i < n_written:
        slot = tl.load(slots_ptr + i)
        cols = tl.arange(0, WIDTH)
        tl.store(cache_ptr + slot * WIDTH + cols, tl.load(values_ptr + i * WIDTH + cols))


def _store_spec(rows_written_of_3: int) -> KernelSpec:
    """A KV-cache store: an in-place update of ``cache`` whose three slots the kernel must
    overwrite without reading them; the broken variant forgets the last one."""

    def make_inputs(p, dtype, device, gen):
        return {
            "cache": torch.randn(ROWS, WIDTH, generator=gen, device=device).to(dtype),
            "values": torch.randn(3, WIDTH, generator=gen, device=device).to(dtype),
            "slots": torch.tensor([6, 1, 3], device=device),
        }

    def launch(t, o, p, config):
        _store_rows[(3,)](t["cache"], t["values"], t["slots"], rows_written_of_3, WIDTH=WIDTH)
        return LaunchConfig({"WIDTH": WIDTH}, num_warps=1, num_stages=1)

    def reference(t, p):
        cache = t["cache"].clone()
        cache[t["slots"]] = t["values"]
        return {"cache": cache}

    def written(t, p):
        mask = torch.zeros(ROWS, WIDTH, dtype=torch.bool, device=t["cache"].device)
        mask[t["slots"]] = True
        return mask

    return KernelSpec(
        name="store_rows",
        summary="cache[slots] = values",
        make_inputs=make_inputs,
        launch=launch,
        inplace={"cache": InPlace("cache", overwritten=written)},
        reference=reference,
        baseline=Baseline("index_put", reference),
        workloads={"smoke": ({"n": 3},)},
        flops=lambda p: 0,
        min_bytes=lambda p, e: 2 * 3 * WIDTH * e,
        dtypes=("fp32",),
    )


def _check(spec: KernelSpec, device):
    return check_case(spec, "t", "smoke", {"n": 3}, "fp32", device)


def test_an_in_place_kernel_is_checked_on_a_copy_with_its_overwritten_part_poisoned(device):
    good = _check(_store_spec(3), device)
    assert good.verdict == "pass", good.reason
    broken = _check(_store_spec(2), device)
    assert broken.verdict == "fail" and broken.unwritten == WIDTH
    assert "4 of 32 elements of 'cache' never written (first at index (3, 0))" in broken.reason


def test_binding_copies_in_place_inputs_outside_the_launch():
    spec = _store_spec(3)
    inputs = spec.make_inputs({}, torch.float32, torch.device("cpu"), torch.Generator())
    before = inputs["cache"].clone()
    strided = torch.randn(ROWS, 2 * WIDTH)[:, ::2]
    bound = launcher.bind(spec, {**inputs, "cache": strided}, {}, poison=lambda dtype: float("nan"))
    assert bound.outputs["cache"] is bound.inputs["cache"]
    assert bound.outputs["cache"].stride() == strided.stride()
    assert int(torch.isnan(bound.outputs["cache"]).sum()) == 3 * WIDTH
    launcher.launch(spec, launcher.bind(spec, inputs, {}), {}, None)
    assert torch.equal(inputs["cache"], before)  # the inputs the reference sees stay as made


def test_an_entry_point_that_launches_no_triton_kernel_is_an_error(device):
    spec = KernelSpec(
        name="fallback",
        summary="a wrapper that takes a torch path on this device",
        make_inputs=lambda p, dtype, dev, gen: {"x": torch.randn(5, generator=gen).to(dtype)},
        call=lambda t, p: {"y": 2 * t["x"]},
        reference=lambda t, p: {"y": 2 * t["x"]},
        baseline=Baseline("torch.mul", lambda t, p: {"y": 2 * t["x"]}),
        workloads={"smoke": ({"n": 3},)},
        flops=lambda p: 5,
        min_bytes=lambda p, e: 10 * e,
        dtypes=("fp32",),
    )
    result = _check(spec, device)
    assert result.verdict == "error"
    assert result.reason.startswith("RuntimeError: the spec's call launched no Triton kernel")


def test_observing_records_constexprs_passed_by_position_or_name():
    x = torch.zeros(ROWS, WIDTH)
    values, slots = torch.ones(3, WIDTH), torch.tensor([0, 1, 2])
    with launcher.observing() as seen:
        _store_rows[(3,)](x, values, slots, 3, WIDTH, num_warps=2)
        _store_rows[(3,)](x, values, slots, 3, WIDTH=WIDTH)
    assert seen.config() == LaunchConfig({"WIDTH": WIDTH}, num_warps=2, num_stages=3)
    assert [arguments for _, arguments in seen.launches][1] == {"WIDTH": WIDTH}
    with pytest.raises(RuntimeError, match="launched no Triton kernel"):
        launcher.Observed().config()
