"""A starting suite for a repository's Triton kernels: what ``kernelwatch init`` writes.

The repository's code is never imported here: its files are parsed (``ast``), and each
jitted function (``@triton.jit``, or bound as ``f = triton.jit(f)``) becomes one spec
whose parts only the kernel's authors know (inputs, reference, baseline, shapes, work) are
``todo(...)`` calls. ``todo`` raises ``KernelUnsupported``,
so a case whose spec still has one is reported ``unsupported``, never ``pass``, and is not
built. A module-level function of the same file that launches the kernel
(``kernel[grid](...)``) is taken as its entry point: the spec calls it (``KernelSpec.call``)
rather than restating its launch logic; so is a ``torch.autograd.Function`` whose
``forward`` launches it (the spec calls its ``apply``).
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath

#: The suite file ``kernelwatch init`` writes, relative to the repository.
SUITE_FILE = "kernelwatch_suite.py"
#: A src/ layout's source root.
SRC = "src"


@dataclass(frozen=True)
class FoundKernel:
    """One ``@triton.jit`` function, and how a suite imports and launches it."""

    function: str
    path: str
    line: int
    module: str
    params: tuple[str, ...]
    constexprs: tuple[str, ...]
    wrapper: str | None = None
    wrapper_params: tuple[str, ...] = ()
    autotuned: bool = False
    reads: tuple[str, ...] = ()
    """The parameters the kernel loads from (``tl.load``, block pointers), in order."""
    writes: tuple[str, ...] = ()
    """The parameters it stores to: outputs, or in place when it also reads them."""
    alone: str | None = None
    """The module's file relative to the source root when a package above it has an
    ``__init__.py``: the suite imports it alone (``kernel_imports.kernel_module``), never
    running that ``__init__`` (which in a bigger package imports the rest of it)."""


@dataclass(frozen=True)
class Scan:
    """What a repository holds: its kernels, the source root they import from (``src`` or
    None for the top) and the files that were skipped, each with why."""

    kernels: tuple[FoundKernel, ...]
    src: str | None
    skipped: tuple[str, ...]


def scan(repo: Path, files: Iterable[str]) -> Scan:
    """The Triton kernels in ``files`` (paths relative to ``repo``, ``/``-separated)."""
    paths = sorted(PurePosixPath(f) for f in files if f.endswith(".py"))
    src = SRC if any(p.parts[0] == SRC and len(p.parts) > 1 for p in paths) else None
    kernels: list[FoundKernel] = []
    skipped: list[str] = []
    for path in paths:
        try:
            tree = ast.parse((repo / path).read_text(), filename=str(path))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            skipped.append(f"{path}: cannot parse it ({type(exc).__name__})")
            continue
        jitted = _jitted(tree)
        if not jitted:
            continue
        module = _module(path, src)
        if module is None:
            skipped.append(f"{path}: not importable as a module (a folder name is no identifier)")
            continue
        alone = _alone(path, src, set(paths))
        kernels += [replace(_found(j, str(path), module, tree), alone=alone) for j in jitted]
    return Scan(tuple(kernels), src, tuple(skipped))


def _alone(path: PurePosixPath, src: str | None, paths: set[PurePosixPath]) -> str | None:
    inside = path.relative_to(src) if src is not None and path.parts[0] == src else path
    packages = [inside.parents[i] for i in range(len(inside.parents) - 1)]
    root = PurePosixPath(src) if src is not None and path.parts[0] == src else PurePosixPath()
    if any(root / package / "__init__.py" in paths for package in packages):
        return str(inside)
    return None


def spec_names(kernels: Iterable[FoundKernel]) -> list[str]:
    """A unique spec name per kernel: ``_scale_kernel`` in ``ops/scale.py`` -> ``scale``; a
    name that does not say its module carries it (``_exact_forward_kernel`` in ``geglu.py``
    -> ``geglu_exact_forward``), so short names (``fg``) still tell where they are from."""
    names: list[str] = []
    for kernel in kernels:
        base = kernel.function.lower().strip("_")
        base = re.sub(r"(^kernel_|_kernel$)", "", base) or base
        module = kernel.module.rsplit(".", 1)[-1].lower().strip("_")
        if module and module not in base and module != "__init__":
            base = f"{module}_{base}"
        base = re.sub(r"[^a-z0-9_]", "_", base)
        base = base if re.match(r"[a-z]", base) else f"k_{base}"
        name, n = base, 2
        while name in names:
            name, n = f"{base}_{n}", n + 1
        names.append(name)
    return names


def suite_name(repo: Path) -> str:
    """The suite's name, from the repository's folder name."""
    name = re.sub(r"[^a-z0-9_]", "_", repo.resolve().name.lower()).strip("_")
    return name if re.match(r"[a-z]", name) else f"suite_{name}".rstrip("_")


def render_suite(found: Scan, name: str) -> str:
    """The text of the starting suite file."""
    names = spec_names(found.kernels)
    imports: dict[str, list[str]] = {}
    alone: dict[str, str] = {}
    for kernel in found.kernels:
        wanted = imports.setdefault(kernel.module, [])
        # A wrapper may be ``Class.apply``: the class is what is imported.
        imported = (kernel.function, kernel.wrapper.split(".")[0] if kernel.wrapper else None)
        wanted += [n for n in imported if n and n not in wanted]
        if kernel.alone is not None:
            alone[kernel.module] = kernel.alone
    lines = [
        '"""The kernelwatch suite of this repository, written by `kernelwatch init`.',
        "",
        "Each `todo(...)` marks what only you know: replace it with your code (docs/SUITES.md,",
        '"From init to a green check"). A case whose spec still has one is reported',
        "`unsupported`, never `pass`, and is not built.",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "import torch",
        "import triton",
        "",
        *(["from kernelwatch.harness.kernel_imports import kernel_module"] if alone else []),
        "from kernelwatch.harness.spec import (",
        *(f"    {n}," for n in _SPEC_NAMES),
        ")",
        "",
        *_imports(imports, alone),
        "",
        "",
        "def todo(kernel, what):",
        '    """A part of a spec still to write: the case is unsupported until it is."""',
        '    raise KernelUnsupported(f"{kernel}: {what} is a TODO in {Path(__file__).name}")',
    ]
    for kernel, spec in zip(found.kernels, names, strict=True):
        lines += _spec_block(kernel, spec)
    specs = ", ".join(n.upper() for n in names)
    lines += ["", "", f'SUITE = Suite(name="{name}", kernels=({specs},))', ""]
    return "\n".join(lines)


def _imports(imports: dict[str, list[str]], alone: dict[str, str]) -> list[str]:
    lines = [
        f"from {module} import {', '.join(sorted(n))}"
        for module, n in sorted(imports.items())
        if module not in alone
    ]
    if alone:
        lines += [
            "",
            "# Imported alone: the package's __init__.py (the rest of the library) never runs.",
            "# A dependency only the kernels need and this machine lacks: stub_modules(...),",
            "# from the same module as kernel_module, before these lines (docs/SUITES.md).",
        ]
    taken: set[str] = set()
    for module, path in sorted(alone.items()):
        variable = _unique(f"{module.rsplit('.', 1)[-1]}_module", taken)
        names = sorted(imports[module])
        lines.append(f'{variable} = kernel_module("{path}")')
        lines.append(f"{', '.join(names)} = {', '.join(f'{variable}.{n}' for n in names)}")
    return lines


def _unique(name: str, taken: set[str]) -> str:
    unique, n = name, 2
    while unique in taken:
        unique, n = f"{name}_{n}", n + 1
    taken.add(unique)
    return unique


def render_config(repo: Path, name: str, suite: str, src: str | None, branch: str) -> str:
    """The text of a ``kernelwatch.toml`` tracking ``repo`` with the written suite."""
    lines = [
        "# kernelwatch configuration, written by `kernelwatch init` (docs/CONFIG.md: every key).",
        "[[repositories]]",
        f"name = {_toml(name)}",
        f"source = {_toml(str(repo.resolve()))}",
        f"suite = {_toml(suite)}",
        *([f"src = {_toml(src)}"] if src else []),
        f"branch = {_toml(branch)}",
        'workload = "smoke"',
        "",
        "[run]",
        'report_dir = "kernelwatch-reports"',
        "",
    ]
    return "\n".join(lines)


_SPEC_NAMES = ("Baseline", "InPlace", "KernelSpec", "KernelUnsupported", "LaunchConfig", "Suite")


def _spec_block(kernel: FoundKernel, spec: str) -> list[str]:
    signature = ", ".join(
        f"{p}: tl.constexpr" if p in kernel.constexprs else p for p in kernel.params
    )
    where = f"{kernel.path}:{kernel.line}"
    lines = [
        "",
        "",
        f"# {spec}: {kernel.function}({signature})",
        f"# in {where}" + (f", launched by {kernel.wrapper}()" if kernel.wrapper else ""),
    ]
    if kernel.autotuned:
        lines.append("# autotuned: on the CPU a spec needs configs= and pinned_config=")
    touched = set(kernel.reads) | set(kernel.writes)
    tensors = [p for p in kernel.params if p in touched] or [
        p for p in kernel.params if p not in kernel.constexprs and _is_pointer(p)
    ]
    # Without a store seen, the last pointer is the likeliest output.
    outputs = [p for p in tensors if p in kernel.writes] or tensors[-1:]
    example_inputs = ", ".join(
        f'"{_tensor(p)}": torch.randn(p["n"], generator=gen, device=device).to(dtype)'
        for p in tensors
        if p not in outputs or p in _in_place(kernel)
    )
    lines += _function(
        f"{spec}_inputs(p, dtype, device, gen)",
        "Fresh random inputs of one case, drawn from `gen` on `device`, by name.",
        spec,
        "make_inputs",
        f"return {{{example_inputs}}}",
    )
    fields = [f'    name="{spec}",', f'    summary="{kernel.function} in {kernel.path}",']
    fields.append(f"    make_inputs={spec}_inputs,")
    if kernel.wrapper:
        arguments = ", ".join(f'inputs["{p}"]' for p in kernel.wrapper_params)
        lines += _function(
            f"{spec}_call(inputs, p)",
            f"Launch through {kernel.wrapper}(); return the outputs it allocated, by name.",
            spec,
            "call",
            f'return {{"out": {kernel.wrapper}({arguments})}}',
        )
        fields.append(f"    call={spec}_call,")
    else:
        made = [_tensor(p) for p in outputs if p not in _in_place(kernel)]
        made = made or ([] if _in_place(kernel) else ["out"])
        made_text = ", ".join(
            f'"{name}": torch.empty(p["n"], dtype=..., device=...)' for name in made
        )
        lines += _function(
            f"{spec}_outputs(inputs, p)",
            "The tensors the kernel writes, by name (poisoned before every launch).",
            spec,
            "make_outputs",
            f"return {{{made_text}}}",
        )
        if _in_place(kernel):
            written = ", ".join(
                f'"{_tensor(p)}": InPlace("{_tensor(p)}")' for p in _in_place(kernel)
            )
            lines.append(
                f"# reads and writes {', '.join(_in_place(kernel))}: inplace={{{written}}}"
            )
        lines += _function(
            f"{spec}_launch(inputs, outputs, p, config)",
            "Launch the kernel once; return the config it used.",
            spec,
            "launch",
            _launch_example(kernel, tensors, outputs),
        )
        fields += [f"    make_outputs={spec}_outputs,", f"    launch={spec}_launch,"]
    lines += _function(
        f"{spec}_reference(inputs, p)",
        "The expected outputs, by name, computed from float64 inputs.",
        spec,
        "reference",
        "return {...}",
    )
    fields += [
        f"    reference={spec}_reference,",
        '    # TODO: the stock-library call to beat, e.g. Baseline("torch.add", lambda inputs, '
        'p: {"out": ...})',
        f'    baseline=Baseline("todo", lambda inputs, p: todo("{spec}", "baseline")),',
        "    # TODO: the params your functions read; smoke runs in the CPU interpreter in seconds",
        '    workloads={"smoke": ({"n": 1}, {"n": 1000})},',
        "    # The FLOPs of one launch and the fewest bytes it moves (elem: bytes an element):",
        "    # the roofline's inputs. A todo here makes bench and pr-check skip the case.",
        f'    flops=lambda p: todo("{spec}", "flops"),',
        f'    min_bytes=lambda p, elem: todo("{spec}", "min_bytes"),',
    ]
    return [*lines, "", "", f"{spec.upper()} = KernelSpec(", *fields, ")"]


def _function(signature: str, doc: str, spec: str, what: str, example: str) -> list[str]:
    return [
        "",
        "",
        f"def {signature}:",
        f'    """{doc}"""',
        *(f"    # e.g. {line}" for line in example.splitlines()),
        f'    todo("{spec}", "{what}")',
    ]


def _in_place(kernel: FoundKernel) -> list[str]:
    return [p for p in kernel.writes if p in kernel.reads]


def _launch_example(kernel: FoundKernel, tensors: list[str], outputs: list[str]) -> str:
    meta = [p for p in kernel.constexprs if p in kernel.params]
    blocks = [m for m in meta if "block" in m.lower()]
    arguments = []
    for p in kernel.params:
        if p in meta:
            continue
        if p in tensors:
            where = "outputs" if p in outputs and p not in _in_place(kernel) else "inputs"
            arguments.append(f'{where}["{_tensor(p)}"]')
        else:
            arguments.append(_scalar(p, tensors, outputs, _in_place(kernel)))
    arguments += [f"{m}={m}" for m in meta]
    grid = f'triton.cdiv(p["n"], {blocks[0]})' if blocks else 'p["n"]'
    # Block sizes are what a config tunes; flags and epsilons are not.
    config = ", ".join(f'"{m}": {m}' for m in blocks or meta)
    return "\n".join(
        [
            *(
                f"{m} = 1024" if m in blocks else f"{m} = ...  # a compile-time constant"
                for m in meta
            ),
            f"{kernel.function}[({grid},)]({', '.join(arguments)})",
            f"return LaunchConfig({{{config}}}, num_warps=4, num_stages=3)",
        ]
    )


def _scalar(param: str, tensors: list[str], outputs: list[str], in_place: list[str]) -> str:
    """A scalar argument's example: a tensor's stride for a stride (``stride_xm``,
    ``X_row_stride``), the case's parameter otherwise."""
    lower = param.lower()
    if "stride" in lower:
        for tensor in tensors:
            name = _tensor(tensor).lower()
            if lower.startswith((f"{name}_", f"stride_{name}")):
                where = "outputs" if tensor in outputs and tensor not in in_place else "inputs"
                return f'{where}["{_tensor(tensor)}"].stride(0)'
    return f'p["{param}"]'


@dataclass(frozen=True)
class _Jitted:
    """A module-level name bound to a jitted function: the name a launch subscripts, the
    ``def`` its parameters come from, where it is bound, whether autotuning wraps it."""

    name: str
    definition: ast.FunctionDef
    line: int
    autotuned: bool


def _jitted(tree: ast.Module) -> list[_Jitted]:
    """The module's kernels, decorated (``@triton.jit``, under ``autotune``/``heuristics``,
    with arguments or without) or bound by a call (``f = triton.jit(f)``,
    ``k = triton.autotune(...)(triton.jit(_k))``)."""
    defs = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    found = [
        _Jitted(f.name, f, f.lineno, any(_is_autotune(d) for d in f.decorator_list))
        for f in defs.values()
        if _is_jit(f)
    ]
    for node in tree.body:
        if not (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            continue
        calls = [c for c in ast.walk(node.value) if isinstance(c, ast.Call)]
        jitted = next(
            (
                defs[c.args[0].id]
                for c in calls
                if _is_jit_call(c) and c.args and isinstance(c.args[0], ast.Name)
                if c.args[0].id in defs
            ),
            None,
        )
        if jitted is not None:
            autotuned = any(_is_autotune(c) for c in calls)
            found.append(_Jitted(node.targets[0].id, jitted, node.lineno, autotuned))
    return sorted(found, key=lambda j: j.line)


def _found(kernel: _Jitted, path: str, module: str, tree: ast.Module) -> FoundKernel:
    f = kernel.definition
    params = tuple(a.arg for a in f.args.args)
    constexprs = tuple(a.arg for a in f.args.args if _is_constexpr(a.annotation))
    wrapper = _wrapper(tree, kernel.name)
    reads, writes = _memory(f, params)
    return FoundKernel(
        function=kernel.name,
        path=path,
        line=kernel.line,
        module=module,
        params=params,
        constexprs=constexprs,
        wrapper=wrapper[0] if wrapper else None,
        wrapper_params=wrapper[1] if wrapper else (),
        autotuned=kernel.autotuned,
        reads=reads,
        writes=writes,
    )


#: ``tl`` calls that read or write memory through their first argument (``pointer=``), those
#: of them that write, and those that pass a pointer on (``base=`` or first argument).
_MEMORY_OPS = frozenset({"load", "store"}) | {
    f"atomic_{op}" for op in ("add", "max", "min", "and", "or", "xor", "xchg", "cas")
}
_WRITES = _MEMORY_OPS - {"load"}
_PASS_ON = frozenset({"make_block_ptr", "make_tensor_descriptor", "advance", "multiple_of"})


def _memory(f: ast.FunctionDef, params: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Which parameters ``f`` reads through ``tl.load`` and writes through ``tl.store`` (and
    atomics, block pointers): the kernel's tensors, whatever they are called (``Y``,
    ``logits``). Pointer arithmetic is followed through local names (``x_ptrs = x_ptr +
    offs``, ``X += row * stride``) along its additive terms only, so the strides and sizes an
    offset is made of are not taken for tensors."""
    origin: dict[str, set[str]] = {p: {p} for p in params}

    def pointed(node: ast.expr | None) -> set[str]:
        if isinstance(node, ast.Name):
            return set(origin.get(node.id, ()))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return pointed(node.left) | pointed(node.right)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
            return pointed(node.left)
        if isinstance(node, ast.Subscript):
            return pointed(node.value)
        if isinstance(node, ast.IfExp):
            return pointed(node.body) | pointed(node.orelse)
        if isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] in _PASS_ON:
            return pointed(_first(node, "base"))
        return set()

    assignments = [n for n in ast.walk(f) if isinstance(n, ast.Assign | ast.AugAssign)]
    for _ in range(2):  # a second pass for names used before the statement that binds them
        for node in assignments:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in (t for t in targets if isinstance(t, ast.Name)):
                origin.setdefault(target.id, set()).update(pointed(node.value))
    read: set[str] = set()
    written: set[str] = set()
    for call in (n for n in ast.walk(f) if isinstance(n, ast.Call)):
        op = _dotted(call.func).split(".")[-1]
        if op in _MEMORY_OPS:
            (written if op in _WRITES else read).update(pointed(_first(call, "pointer")))
    return tuple(p for p in params if p in read), tuple(p for p in params if p in written)


def _first(call: ast.Call, keyword: str) -> ast.expr | None:
    if call.args:
        return call.args[0]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _wrapper(tree: ast.Module, kernel: str) -> tuple[str, tuple[str, ...]] | None:
    """What a spec calls to launch ``kernel``, and its parameters: a module-level function
    that launches it, else the ``apply`` of an ``autograd.Function`` whose ``forward`` does
    (less ``ctx``)."""
    for g in tree.body:
        if isinstance(g, ast.FunctionDef) and not _is_jit(g) and _launches(g, kernel):
            return g.name, tuple(a.arg for a in g.args.args)
    for c in tree.body:
        if not (
            isinstance(c, ast.ClassDef)
            and any(_dotted(b).split(".")[-1] == "Function" for b in c.bases)
        ):
            continue
        for g in c.body:
            if isinstance(g, ast.FunctionDef) and g.name == "forward" and _launches(g, kernel):
                return f"{c.name}.apply", tuple(a.arg for a in g.args.args[1:])
    return None


def _is_jit(f: ast.FunctionDef) -> bool:
    return any(_is_jit_call(d) for d in f.decorator_list)


def _is_jit_call(node: ast.expr) -> bool:
    return _dotted(node).split(".")[-1] == "jit"


def _is_autotune(node: ast.expr) -> bool:
    return _dotted(node).split(".")[-1] == "autotune"


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _is_constexpr(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = annotation.value if isinstance(annotation, ast.Constant) else _dotted(annotation)
    return str(text).split(".")[-1] == "constexpr"


def _launches(g: ast.FunctionDef, kernel: str) -> bool:
    """Whether ``g`` launches ``kernel``: ``kernel[grid](...)``."""
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Subscript)
        and _dotted(node.func.value).split(".")[-1] == kernel
        for node in ast.walk(g)
    )


def _module(path: PurePosixPath, src: str | None) -> str | None:
    parts = list(path.with_suffix("").parts)
    if src is not None and parts[0] == src:
        parts = parts[1:]
    if parts and parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return None
    return ".".join(parts)


def _is_pointer(param: str) -> bool:
    return param.lower().endswith("ptr")


def _tensor(param: str) -> str:
    return re.sub(r"_?ptr$", "", param, flags=re.IGNORECASE) or param


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
