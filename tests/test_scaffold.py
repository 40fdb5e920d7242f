"""What ``kernelwatch init`` finds in a repository's files without importing them (issue 33):
every way a Triton kernel is bound, the wrapper a spec calls, and the parts of the starting
suite that are the user's to write."""

from __future__ import annotations

import textwrap
from pathlib import Path

from kernelwatch.harness.scaffold import FoundKernel, render_suite, scan, spec_names

BOUND_BY_CALLS = """
import torch
import triton
import triton.language as tl


def _rope(q_ptr, cos_ptr, n, BLOCK: tl.constexpr):
    pass


_rope = triton.jit(_rope)


def _xent_impl(logits_ptr, loss_ptr, n_cols, BLOCK: tl.constexpr):
    pass


xent = triton.autotune(configs=[], key=["n_cols"])(triton.jit(_xent_impl))


def _bwd(dy_ptr, dx_ptr, n):
    pass


_bwd = triton.jit(do_not_specialize=["n"])(_bwd)


@torch.library.custom_op("lib::bwd", mutates_args=("dx",))
def bwd(dy: torch.Tensor, dx: torch.Tensor) -> None:
    _bwd[(1,)](dy, dx, dy.numel())


@triton.heuristics({"EVEN": lambda args: args["n"] % 2 == 0})
@triton.jit(do_not_specialize=["n"])
def _decorated(x_ptr, n, EVEN: tl.constexpr):
    pass


class Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, cos):
        _rope[(1,)](q, cos, q.numel(), BLOCK=128)
        return q

    @staticmethod
    def backward(ctx, dq):
        return dq, None


def rope(q, cos):
    return Rope.apply(q, cos)


def not_a_kernel(x):
    return triton.cdiv(x, 2)
"""


def _scan(tmp_path: Path, source: str):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "ops.py").write_text(textwrap.dedent(source))
    return scan(tmp_path, ["lib/ops.py"])


def test_kernels_bound_by_a_call_are_found_with_their_definitions_parameters(tmp_path):
    found = {k.function: k for k in _scan(tmp_path, BOUND_BY_CALLS).kernels}
    assert sorted(found) == ["_bwd", "_decorated", "_rope", "xent"]
    assert found["xent"].params == ("logits_ptr", "loss_ptr", "n_cols", "BLOCK")
    assert found["xent"].constexprs == ("BLOCK",) and found["xent"].autotuned
    assert found["_bwd"].params == ("dy_ptr", "dx_ptr", "n") and not found["_bwd"].autotuned
    # A torch.library custom op is a function that launches the kernel: its entry point.
    assert (found["_bwd"].wrapper, found["_bwd"].wrapper_params) == ("bwd", ("dy", "dx"))
    assert found["_decorated"].constexprs == ("EVEN",)
    assert found["_rope"].line == BOUND_BY_CALLS.splitlines().index("_rope = triton.jit(_rope)") + 1


def test_an_autograd_function_whose_forward_launches_the_kernel_is_its_entry_point(tmp_path):
    scanned = _scan(tmp_path, BOUND_BY_CALLS)
    (rope,) = [k for k in scanned.kernels if k.function == "_rope"]
    assert (rope.wrapper, rope.wrapper_params) == ("Rope.apply", ("q", "cos"))
    suite = render_suite(scanned, "lib")
    assert "from lib.ops import Rope, _bwd, _decorated, _rope, bwd, xent" in suite
    assert '# e.g. return {"out": Rope.apply(inputs["q"], inputs["cos"])}' in suite
    assert "call=ops_rope_call," in suite
    compile(suite, "kernelwatch_suite.py", "exec")


def test_the_work_of_a_launch_is_a_todo_not_a_silent_zero(tmp_path):
    suite = render_suite(_scan(tmp_path, BOUND_BY_CALLS), "lib")
    assert '    flops=lambda p: todo("ops_rope", "flops"),' in suite
    assert '    min_bytes=lambda p, elem: todo("ops_rope", "min_bytes"),' in suite
    assert "lambda p: 0" not in suite and "elem: 0" not in suite


def test_a_spec_name_carries_its_module_unless_the_kernel_name_says_it(tmp_path):
    """Issue 33: ``fg`` and ``exact_forward`` lost the module (``geglu``) they came from."""
    kernels = _scan(tmp_path, BOUND_BY_CALLS).kernels
    assert spec_names(kernels) == ["ops_rope", "ops_xent", "ops_bwd", "ops_decorated"]
    geglu = [
        FoundKernel("_exact_forward_kernel", "geglu.py", 1, "lib.geglu", (), ()),
        FoundKernel("_fg_kernel", "geglu.py", 9, "lib.geglu", (), ()),
        FoundKernel("_geglu_kernel", "geglu.py", 19, "lib.geglu", (), ()),
    ]
    assert spec_names(geglu) == ["geglu_exact_forward", "geglu_fg", "geglu"]


ROW_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def _rms_layernorm_forward(
    Y, Y_row_stride, X, X_row_stride, W, n_cols, eps: tl.constexpr, BLOCK_SIZE: tl.constexpr
):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    Y += row_idx * Y_row_stride
    X += row_idx * X_row_stride
    X_row = tl.load(X + col_offsets, mask=mask, other=0)
    W_row = tl.load(W + col_offsets, mask=mask, other=0)
    inv = tl.rsqrt(tl.sum(X_row * X_row, axis=0) / n_cols + eps)
    tl.store(Y + col_offsets, X_row * inv * W_row, mask=mask)


@triton.jit
def _add_inplace(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x_ptrs = x_ptr + offs
    tl.store(x_ptrs, tl.load(x_ptrs, mask=offs < n) + tl.load(y_ptr + offs, mask=offs < n))
"""


def test_the_launch_template_knows_tensors_from_strides_and_outputs_from_stores(tmp_path):
    """Issue 33: pointers named ``Y``/``X`` were passed as ``p["Y"]``, ``eps`` was given
    ``= 1024`` and the grid was ``cdiv(p["n"], Y_row_stride)``."""
    scanned = _scan(tmp_path, ROW_KERNEL)
    rms, add = scanned.kernels
    assert (rms.reads, rms.writes) == (("X", "W"), ("Y",))
    assert (add.reads, add.writes) == (("x_ptr", "y_ptr"), ("x_ptr",))
    suite = render_suite(scanned, "lib")
    launch = (
        '# e.g. _rms_layernorm_forward[(triton.cdiv(p["n"], BLOCK_SIZE),)](outputs["Y"], '
        'outputs["Y"].stride(0), inputs["X"], inputs["X"].stride(0), inputs["W"], '
        'p["n_cols"], eps=eps, BLOCK_SIZE=BLOCK_SIZE)'
    )
    assert launch in suite
    assert "# e.g. eps = ...  # a compile-time constant" in suite
    assert "# e.g. BLOCK_SIZE = 1024" in suite
    assert '# e.g. return LaunchConfig({"BLOCK_SIZE": BLOCK_SIZE}, num_warps=4' in suite
    assert '# e.g. return {"Y": torch.empty(p["n"], dtype=..., device=...)}' in suite
    assert '# e.g. return {"X": torch.randn(' in suite and '"W": torch.randn(' in suite
    assert '# reads and writes x_ptr: inplace={"x": InPlace("x")}' in suite
    assert '_add_inplace[(triton.cdiv(p["n"], BLOCK),)](inputs["x"], inputs["y"], p["n"]' in suite
    assert "# e.g. return {}" in suite
    compile(suite, "kernelwatch_suite.py", "exec")
