"""A starting suite for a repository's Triton kernels: what ``kernelwatch init`` writes.

The repository's code is never imported here: its files are parsed (``ast``), and each
``@triton.jit`` function becomes one spec whose parts only the kernel's authors know (inputs,
reference, baseline, shapes) are ``todo(...)`` calls. ``todo`` raises ``KernelUnsupported``,
so a case whose spec still has one is reported ``unsupported``, never ``pass``, and is not
built. A module-level function of the same file that launches the kernel
(``kernel[grid](...)``) is taken as its entry point: the spec calls it (``KernelSpec.call``)
rather than restating its launch logic.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass
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
        jitted = [f for f in tree.body if isinstance(f, ast.FunctionDef) and _is_jit(f)]
        if not jitted:
            continue
        module = _module(path, src)
        if module is None:
            skipped.append(f"{path}: not importable as a module (a folder name is no identifier)")
            continue
        kernels += [_found(f, str(path), module, tree) for f in jitted]
    return Scan(tuple(kernels), src, tuple(skipped))


def spec_names(kernels: Iterable[FoundKernel]) -> list[str]:
    """A unique spec name per kernel: ``_scale_kernel`` -> ``scale``."""
    names: list[str] = []
    for kernel in kernels:
        base = kernel.function.lower().strip("_")
        base = re.sub(r"(^kernel_|_kernel$)", "", base) or base
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
    for kernel in found.kernels:
        wanted = imports.setdefault(kernel.module, [])
        wanted += [n for n in (kernel.function, kernel.wrapper) if n and n not in wanted]
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
        "from kernelwatch.harness.spec import (",
        *(f"    {n}," for n in _SPEC_NAMES),
        ")",
        "",
        *(f"from {module} import {', '.join(sorted(n))}" for module, n in sorted(imports.items())),
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
    tensors = [p for p in kernel.params if p not in kernel.constexprs and _is_pointer(p)]
    example_inputs = ", ".join(
        f'"{_tensor(p)}": torch.randn(p["n"], generator=gen, device=device).to(dtype)'
        for p in tensors[:1]
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
        output = _tensor(tensors[-1]) if tensors else "out"
        lines += _function(
            f"{spec}_outputs(inputs, p)",
            "The tensors the kernel writes, by name (poisoned before every launch).",
            spec,
            "make_outputs",
            f'return {{"{output}": torch.empty(p["n"], dtype=..., device=...)}}',
        )
        lines += _function(
            f"{spec}_launch(inputs, outputs, p, config)",
            "Launch the kernel once; return the config it used.",
            spec,
            "launch",
            _launch_example(kernel, tensors),
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
        "    flops=lambda p: 0,  # TODO: the FLOPs of one launch",
        "    min_bytes=lambda p, elem: 0,  # TODO: the fewest bytes one launch moves",
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


def _launch_example(kernel: FoundKernel, tensors: list[str]) -> str:
    meta = [p for p in kernel.constexprs if p in kernel.params]
    arguments = []
    for p in kernel.params:
        if p in meta:
            continue
        # The last pointer is the likeliest output.
        where = "outputs" if tensors and p == tensors[-1] else "inputs"
        arguments.append(f'{where}["{_tensor(p)}"]' if p in tensors else f'p["{p}"]')
    arguments += [f"{m}={m}" for m in meta]
    block = meta[0] if meta else "BLOCK"
    config = ", ".join(f'"{m}": {m}' for m in meta)
    return "\n".join(
        [
            *(f"{m} = 1024" for m in meta),
            f'{kernel.function}[(triton.cdiv(p["n"], {block}),)]({", ".join(arguments)})',
            f"return LaunchConfig({{{config}}}, num_warps=4, num_stages=3)",
        ]
    )


def _found(f: ast.FunctionDef, path: str, module: str, tree: ast.Module) -> FoundKernel:
    params = tuple(a.arg for a in f.args.args)
    constexprs = tuple(a.arg for a in f.args.args if _is_constexpr(a.annotation))
    wrapper = next(
        (
            g
            for g in tree.body
            if isinstance(g, ast.FunctionDef) and not _is_jit(g) and _launches(g, f.name)
        ),
        None,
    )
    return FoundKernel(
        function=f.name,
        path=path,
        line=f.lineno,
        module=module,
        params=params,
        constexprs=constexprs,
        wrapper=wrapper.name if wrapper else None,
        wrapper_params=tuple(a.arg for a in wrapper.args.args) if wrapper else (),
        autotuned=any(_dotted(d).endswith("autotune") for d in f.decorator_list),
    )


def _is_jit(f: ast.FunctionDef) -> bool:
    return any(_dotted(d).split(".")[-1] == "jit" for d in f.decorator_list)


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
