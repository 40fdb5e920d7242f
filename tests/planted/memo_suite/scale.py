"""The scale kernel; its spec is common.py's shape (the module holds it)."""

from __future__ import annotations

import triton
import triton.language as tl

from memo_suite.common import spec


@triton.jit
def scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, x * 2.0, mask=mask)


SPEC = spec("scale", scale_kernel, 2.0)
