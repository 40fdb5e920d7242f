"""A kernel repository as a new user brings one (issue 18): a ``src/`` layout whose package
is a PEP 420 namespace package (no ``__init__.py``), a host wrapper that allocates its output
and picks its warps by architecture, an in-place kernel, float scalar arguments and a
libdevice call. ``kernelwatch init`` writes its suite; :func:`fill` fills the suite's
``todo(...)``s the way docs/SUITES.md says."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from gitrepo import git

SCALE = textwrap.dedent(
    '''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = x * alpha.to(tl.float32) + beta
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


    def scale(x: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
        """alpha * x + beta in fp32; Blackwell gets twice the warps."""
        out = torch.empty_like(x)
        n = x.numel()
        gpu = x.device.type != "cpu"
        warps = 8 if gpu and torch.cuda.get_device_capability()[0] >= 10 else 4
        block = 1024 if n >= 1 << 16 else 128
        grid = (triton.cdiv(n, block),)
        _scale_kernel[grid](x, out, n, alpha, beta, BLOCK=block, num_warps=warps)
        return out
    '''
)

ADD = textwrap.dedent(
    '''
    import triton
    import triton.language as tl


    @triton.jit
    def _add_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(x_ptr + offs, x + y, mask=mask)


    def add_(x, y):
        """x += y, in place."""
        n = x.numel()
        _add_kernel[(triton.cdiv(n, 256),)](x, y, n, BLOCK=256)
        return x
    '''
)

GELU = textwrap.dedent(
    """
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    BLOCK_SIZE = 1024


    @triton.jit
    def _gelu_tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
        inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
        y = 0.5 * x * (1.0 + libdevice.tanh(inner))
        tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
    """
)

FILES = {"src/acme/ops/scale.py": SCALE, "src/acme/ops/add.py": ADD, "src/acme/ops/gelu.py": GELU}

#: What a person writes in place of each todo(...) of the suite ``init`` writes: the body of
#: each function, then the spec fields to change.
BODIES = {
    "scale_inputs": 'return {"x": torch.randn(p["n"], generator=gen, device=device).to(dtype)}',
    "scale_call": 'return {"out": scale(inputs["x"], 1.5, -0.25)}',
    "scale_reference": 'return {"out": 1.5 * inputs["x"] - 0.25}',
    "add_inputs": (
        'return {name: torch.randn(p["n"], generator=gen, device=device).to(dtype)\n'
        '        for name in ("x", "y")}'
    ),
    "add_call": 'add_(inputs["x"], inputs["y"])\nreturn {}',
    "add_reference": 'return {"x": inputs["x"] + inputs["y"]}',
    "gelu_tanh_inputs": (
        'return {"x": torch.randn(p["n"], generator=gen, device=device).to(dtype)}'
    ),
    "gelu_tanh_outputs": 'return {"out": torch.empty_like(inputs["x"])}',
    "gelu_tanh_launch": (
        "BLOCK = BLOCK_SIZE\n"
        'grid = (triton.cdiv(p["n"], BLOCK),)\n'
        '_gelu_tanh_kernel[grid](inputs["x"], outputs["out"], p["n"], BLOCK=BLOCK)\n'
        'return LaunchConfig({"BLOCK": BLOCK}, num_warps=4, num_stages=3)'
    ),
    "gelu_tanh_reference": (
        'x = inputs["x"]\n'
        'return {"out": 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x**3)))}'
    ),
}
FIELDS = {
    "scale": 'baseline=Baseline("torch", lambda inputs, p: {"out": 1.5 * inputs["x"] - 0.25}),',
    "add": (
        'baseline=Baseline("torch.add", lambda inputs, p: {"x": inputs["x"] + inputs["y"]}),\n'
        '    inplace={"x": InPlace("x")},'
    ),
    "gelu_tanh": (
        'baseline=Baseline("torch.gelu", lambda inputs, p: '
        '{"out": torch.nn.functional.gelu(inputs["x"], approximate="tanh")}),'
    ),
}
#: Each spec's work of one launch, as docs/SUITES.md says to write it: FLOPs, fewest bytes.
WORK = {
    "scale": ('lambda p: 2 * p["n"]', 'lambda p, elem: 2 * p["n"] * elem'),
    "add": ('lambda p: p["n"]', 'lambda p, elem: 3 * p["n"] * elem'),
    "gelu_tanh": ('lambda p: 8 * p["n"]', 'lambda p, elem: 2 * p["n"] * elem'),
}
#: The suite's import of the gelu module, once its launch reads the module's block size.
GELU_IMPORT = ("import _gelu_tanh_kernel", "import BLOCK_SIZE, _gelu_tanh_kernel")


@dataclass(frozen=True)
class Filling:
    """What a user writes into the suite ``init`` wrote, per docs/SUITES.md: each function's
    body, each spec's baseline (and other fields), each spec's work, the dtypes checked and
    any other line to change."""

    bodies: dict[str, str]
    fields: dict[str, str]
    work: dict[str, tuple[str, str]]
    dtypes: tuple[str, ...] = ("fp32", "fp16")
    edits: tuple[tuple[str, str], ...] = ()


ACME = Filling(BODIES, FIELDS, WORK, edits=(GELU_IMPORT,))


def fill(suite: str, filling: Filling = ACME) -> str:
    """``suite`` as ``init`` wrote it, with every todo(...) replaced as docs/SUITES.md says:
    each function's ``todo`` line by its body, each spec's baseline by a real one, its work,
    and the workloads cut to what the tests can afford (two small sizes)."""
    for name, body in filling.bodies.items():
        pattern = rf"(def {name}\(.*\):\n    \"\"\".*\"\"\"\n)(?:    #.*\n)*    todo\(.*\)\n"
        indented = textwrap.indent(body, "    ")
        suite, count = re.subn(pattern, lambda m, b=indented: m.group(1) + b + "\n", suite)
        assert count == 1, f"no todo(...) in {name}"
    for spec, fields in filling.fields.items():
        todo = f'    baseline=Baseline("todo", lambda inputs, p: todo("{spec}", "baseline")),'
        count = suite.count(todo)
        suite = suite.replace(todo, "    " + fields)
        assert count == 1, f"no baseline todo in {spec}"
    for spec, (flops, moved) in filling.work.items():
        for field, todo, formula in (
            ("flops", f'lambda p: todo("{spec}", "flops")', flops),
            ("min_bytes", f'lambda p, elem: todo("{spec}", "min_bytes")', moved),
        ):
            line = f"    {field}={todo},"
            assert suite.count(line) == 1, f"no {field} todo in {spec}"
            suite = suite.replace(line, f"    {field}={formula},")
    for edit in filling.edits:
        suite = suite.replace(*edit)
    suite = suite.replace(
        '    workloads={"smoke": ({"n": 1}, {"n": 1000})},',
        f'    workloads={{"smoke": ({{"n": 1}}, {{"n": 333}})}},\n    dtypes={filling.dtypes!r},',
    )
    assert "todo(" not in suite.split("def todo(", 1)[1], suite
    return suite


def make_repo(path: Path) -> Path:
    """The repository with its kernels committed on ``main`` (no suite yet)."""
    for name, text in FILES.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    (path / "README.md").write_text("acme kernels\n")
    git(path, "init", "-q", "-b", "main")
    commit(path, "kernels")
    return path


def commit(path: Path, message: str, files: dict[str, str] | None = None) -> str:
    """Write ``files`` (name in the repository: text), commit everything, and return the
    new commit's sha."""
    for name, text in (files or {}).items():
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", message)
    return git(path, "rev-parse", "HEAD")
