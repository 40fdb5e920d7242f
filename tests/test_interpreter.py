"""kernelwatch's set-up of Triton's CPU interpreter (``harness/interpreter.py``) runs kernels
as the GPU compiler would: float arguments are fp32 scalars, libdevice functions with a
NumPy equivalent compute it. The test process chose its device in ``conftest.py``."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.language.extra.cuda import libdevice as cuda_libdevice

from kernelwatch.harness.interpreter import numpy_equivalent

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU interpreter only")


@triton.jit
def _scale(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * alpha, mask=mask)


@triton.jit
def _scale_cast(x_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, x * alpha.to(tl.float32), mask=mask)


@triton.jit
def _math(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = libdevice.tanh(x) + cuda_libdevice.rsqrt(x * x + 1.0) + libdevice.erf(x)
    tl.store(out_ptr + offs, y + libdevice.pow(x, 2.0), mask=mask)


@triton.jit
def _no_equivalent(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, libdevice.j0(x), mask=mask)


def test_a_float_argument_is_an_fp32_scalar_that_promotes_fp16():
    x = torch.randn(37, generator=torch.Generator().manual_seed(1)).half()
    out = torch.empty(37)
    _scale[(1,)](x, out, 37, 1.0001, BLOCK=64)
    # fp16 * fp32 scalar is computed in fp32, as on the GPU (an fp16 product is off by ~1e-4)
    assert torch.equal(out, x.float() * torch.tensor(1.0001, dtype=torch.float32))
    _scale_cast[(1,)](x, out, 37, 2.5, BLOCK=64)
    assert torch.equal(out, x.float() * 2.5)


def test_libdevice_functions_compute_their_numpy_equivalent():
    x = torch.randn(37, generator=torch.Generator().manual_seed(2))
    out = torch.empty(37)
    _math[(1,)](x, out, 37, BLOCK=64)
    expected = torch.tanh(x) + torch.rsqrt(x * x + 1) + torch.erf(x) + x * x
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)


def test_a_libdevice_function_without_equivalent_says_what_to_do():
    x = torch.randn(8)
    with pytest.raises(Exception, match=r"__nv_j0f has no NumPy equivalent.*KernelUnsupported"):
        _no_equivalent[(1,)](x, torch.empty(8), 8, BLOCK=8)


@pytest.mark.parametrize(
    ("symbol", "name"),
    [("__nv_expf", "exp"), ("__nv_exp", "exp"), ("__nv_erff", "erf"), ("__nv_erf", "erf"),
     ("__nv_fast_expf", "exp"), ("__nv_powif", "powi"), ("__nv_j0f", None)],
)  # fmt: skip
def test_libdevice_symbols_map_to_their_function(symbol, name):
    from kernelwatch.harness.interpreter import NUMPY_EQUIVALENTS

    assert numpy_equivalent(symbol) is (NUMPY_EQUIVALENTS[name] if name else None)
