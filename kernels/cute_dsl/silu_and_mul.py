"""SwiGLU (``silu_and_mul``) in the CuTe DSL: ``out = silu(x[:, :I]) * x[:, I:]``.

The same operation, layout and rounding as ``activation.py``'s Triton kernel (fp32 arithmetic,
one rounding at the store), written as a CuTe DSL kernel is written at its simplest: one
output element a thread, a block of ``threads`` columns of one token, so neighbouring threads
read neighbouring gate and up elements. The spec passes dynamic layouts
(``kernels/silu_cute.py``), so one compile a dtype serves every shape; a padded row is just a
larger row stride.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute


@cute.kernel
def silu_and_mul_kernel(x: cute.Tensor, out: cute.Tensor, threads: cutlass.Constexpr) -> None:
    tidx, _, _ = cute.arch.thread_idx()
    token, column_block, _ = cute.arch.block_idx()
    n_inter = out.shape[1]
    col = column_block * threads + tidx
    if col < n_inter:
        gate = x[token, col].to(cutlass.Float32)
        up = x[token, col + n_inter].to(cutlass.Float32)
        out[token, col] = (gate / (1.0 + cute.math.exp(-gate)) * up).to(out.element_type)


@cute.jit
def silu_and_mul(x: cute.Tensor, out: cute.Tensor, threads: cutlass.Constexpr) -> None:
    """Launch over ``(tokens, ceil(I / threads))`` blocks of ``threads`` threads."""
    tokens = cute.size(out, mode=[0])
    blocks = (cute.size(out, mode=[1]) + threads - 1) // threads
    silu_and_mul_kernel(x, out, threads).launch(grid=(tokens, blocks, 1), block=(threads, 1, 1))
