"""A kernel library inside a bigger package (issue 33): ``biglib/__init__.py`` and
``biglib/kernels/__init__.py`` import the rest of the library, a module this machine lacks.
Its three kernels are bound each way a library binds them: ``f = triton.jit(f)`` launched
from an ``autograd.Function``'s ``forward`` (RMSNorm, block size from a helper module beside
it), ``@triton.jit`` with a host wrapper (scale), and ``f = triton.jit(f)`` with no wrapper
(SwiGLU). :data:`FILLING` is what a user writes into the suite ``init`` wrote."""

from __future__ import annotations

import textwrap

from kernelrepo import Filling

RMS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl

    from biglib.kernels.utils import block_for


    def _rms_fwd(x_ptr, y_ptr, n, eps, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / n + eps)
        tl.store(y_ptr + offs, (x * inv).to(y_ptr.dtype.element_ty), mask=mask)


    _rms_fwd = triton.jit(_rms_fwd)


    class RMSNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, eps):
            y = torch.empty_like(x)
            _rms_fwd[(1,)](x, y, x.numel(), eps, BLOCK=block_for(x.numel()))
            return y
    """
)

SCALE = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, a, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a, mask=mask)


    def scale(x, a):
        out = torch.empty_like(x)
        _scale_kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), a, BLOCK=128)
        return out
    """
)
#: scale's planted regression: the same product, computed eight times over.
SLOW_SCALE = SCALE.replace(
    "    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * a, mask=mask)\n",
    "    acc = tl.zeros([BLOCK], dtype=tl.float32)\n"
    "    for _ in range(0, 8):\n"
    "        acc += tl.load(x_ptr + offs, mask=mask) * a\n"
    "    tl.store(out_ptr + offs, acc / 8, mask=mask)\n",
)
assert SLOW_SCALE != SCALE

SWIGLU = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    def _swiglu_fwd(e_ptr, g_ptr, h_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        e = tl.load(e_ptr + offs, mask=mask).to(tl.float32)
        g = tl.load(g_ptr + offs, mask=mask)
        tl.store(h_ptr + offs, (e * tl.sigmoid(e)).to(g.dtype) * g, mask=mask)


    _swiglu_fwd = triton.jit(_swiglu_fwd)
    """
)

FILES = {
    "biglib/__init__.py": "import kw_training_stack  # the rest of the library\n",
    "biglib/kernels/__init__.py": "from .rms import *\nimport kw_training_stack\n",
    "biglib/kernels/utils.py": "import triton\n\n\ndef block_for(n):\n"
    "    return triton.next_power_of_2(n)\n",
    "biglib/kernels/rms.py": RMS,
    "biglib/kernels/scale.py": SCALE,
    "biglib/kernels/swiglu.py": SWIGLU,
    "README.md": "biglib: a training library with kernels inside\n",
}

_X = 'return {"x": torch.randn(p["n"], generator=gen, device=device).to(dtype)}'
FILLING = Filling(
    bodies={
        "rms_fwd_inputs": _X,
        "rms_fwd_call": 'return {"y": RMSNorm.apply(inputs["x"], 1e-6)}',
        "rms_fwd_reference": (
            'x = inputs["x"]\nreturn {"y": x * torch.rsqrt((x * x).mean() + 1e-6)}'
        ),
        "scale_inputs": _X,
        "scale_call": 'return {"out": scale(inputs["x"], 1.5)}',
        "scale_reference": 'return {"out": 1.5 * inputs["x"]}',
        "swiglu_fwd_inputs": (
            'return {"e": torch.randn(p["n"], generator=gen, device=device).to(dtype), '
            '"g": torch.randn(p["n"], generator=gen, device=device).to(dtype)}'
        ),
        "swiglu_fwd_outputs": 'return {"h": torch.empty_like(inputs["e"])}',
        "swiglu_fwd_launch": (
            '_swiglu_fwd[(triton.cdiv(p["n"], 128),)](inputs["e"], inputs["g"], outputs["h"], '
            'p["n"], BLOCK=128)\n'
            'return LaunchConfig({"BLOCK": 128}, num_warps=4, num_stages=3)'
        ),
        "swiglu_fwd_reference": (
            'e, g = inputs["e"], inputs["g"]\nreturn {"h": e * torch.sigmoid(e) * g}'
        ),
    },
    fields={
        "rms_fwd": 'baseline=Baseline("torch.rms_norm", lambda inputs, p: {"y": '
        'torch.rms_norm(inputs["x"], (p["n"],), eps=1e-6)}),',
        "scale": 'baseline=Baseline("torch.mul", lambda inputs, p: {"out": 1.5 * inputs["x"]}),',
        "swiglu_fwd": 'baseline=Baseline("torch", lambda inputs, p: {"h": '
        'torch.nn.functional.silu(inputs["e"]) * inputs["g"]}),',
    },
    work={
        "rms_fwd": ('lambda p: 3 * p["n"]', 'lambda p, elem: 2 * p["n"] * elem'),
        "scale": ('lambda p: p["n"]', 'lambda p, elem: 2 * p["n"] * elem'),
        "swiglu_fwd": ('lambda p: 6 * p["n"]', 'lambda p, elem: 3 * p["n"] * elem'),
    },
    dtypes=("fp32",),
)
