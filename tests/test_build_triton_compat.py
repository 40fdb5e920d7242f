"""The build stage's compiler under the Triton the GPU hosts run (3.6) as well as this
machine's (3.9).

Triton 3.6 has no ``_triton_jit_function_registry``; Triton 3.9 has one, of ``@triton.jit``
functions only. The compiler's line-free source hash (the cache key's source part) must need
no such list. Triton 3.9 itself reads its registry when it defines and specialises a kernel,
so it is taken away here only once the launch is recorded, for the compile; the whole
built-in suite under the real Triton 3.6 is ``scripts/triton_versions.sh`` (docs/BUILD.md).
Compiles run in a child process: this one imported Triton for its CPU interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelwatch.harness.records import BuildMetrics

HELPERS = textwrap.dedent(
    """
    import triton
    import triton.language as tl


    @triton.constexpr_function
    def doubled(n):
        return 2 * n


    @triton.jit
    def twice(x):
        return TWICE
    """
)
KERNEL = textwrap.dedent(
    """
    import triton
    import triton.language as tl

    import HELPERS as helpers


    @triton.jit
    def kernel(x_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, helpers.doubled(BLOCK))
        tl.store(x_ptr + offs, helpers.twice(tl.load(x_ptr + offs)))
    """
)
#: What an edit above a function is: lines added before it, its code the same.
ABOVE = "# a licence header\n# that grew\n\n\n"


def _import(path: Path, name: str, source: str) -> object:
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def define(monkeypatch, tmp_path):
    """Define Triton kernels in files, as the build child sees them: JIT functions, not the
    interpreter's (this test process runs the suite through ``TRITON_INTERPRET=1``)."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    created: list[str] = []

    def module(name: str, helpers: str, kernel: str) -> object:
        helper_name, kernel_name = f"kwcompat_helpers_{name}", f"kwcompat_{name}"
        created.extend((helper_name, kernel_name))
        _import(tmp_path / f"{helper_name}.py", helper_name, helpers)
        source = kernel.replace("HELPERS", helper_name)
        return _import(tmp_path / f"{kernel_name}.py", kernel_name, source)

    yield module
    for name in created:
        sys.modules.pop(name, None)


#: The build child's part, in a process of its own like the build stage's children: Triton
#: imported without the interpreter, and each kernel's launch recorded, then compiled for
#: sm_90a through one cache with the registry taken away. One record per line.
CHILD = textwrap.dedent(
    """
    import importlib
    import sys
    from pathlib import Path

    import torch
    import triton.runtime.jit

    from kernelwatch.harness.build import compiler
    from kernelwatch.harness.build.cache import BuildCache
    from kernelwatch.harness.build.capture import recording
    from kernelwatch.harness.build.plan import Job

    root = Path(sys.argv[1])
    sys.path.insert(0, str(root))
    cache = BuildCache(root / "build-cache")
    for name in sys.argv[2:]:
        module = importlib.import_module(f"kwcompat_{name}")
        with recording(90) as recorder:
            x = torch.empty(1024, dtype=torch.float16, device="meta")
            module.kernel[(1,)](x, BLOCK=512, num_warps=4)
        (launch,) = recorder.launches
        job = Job(name, "fp16", "smoke", "n=1024", None, launch, "sm_90a")
        registry = vars(triton.runtime.jit).pop("_triton_jit_function_registry", None)
        try:
            print(compiler.build(job, "compat", cache).dumps(), flush=True)
        finally:
            if registry is not None:
                triton.runtime.jit._triton_jit_function_registry = registry
    """
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, BuildMetrics]:
    """In one child, in order: the kernel; the same kernel and helpers with lines added above
    both; the kernel with its JIT helper's code edited."""
    root = tmp_path_factory.mktemp("compat")
    helpers = HELPERS.replace("TWICE", "x + x")
    sources = {
        "original": (helpers, KERNEL),
        "moved": (ABOVE + helpers, ABOVE + ABOVE + KERNEL),
        "edited": (HELPERS.replace("TWICE", "x * 2"), KERNEL),
    }
    for name, (helper_source, kernel_source) in sources.items():
        (root / f"kwcompat_helpers_{name}.py").write_text(helper_source)
        kernel_source = kernel_source.replace("HELPERS", f"kwcompat_helpers_{name}")
        (root / f"kwcompat_{name}.py").write_text(kernel_source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(root / "triton-cache")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), *sources],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [BuildMetrics.from_json(json.loads(line)) for line in proc.stdout.splitlines()]
    return {r.kernel: r for r in records}


def test_compiles_for_sm_90a_without_the_jit_function_registry(built):
    record = built["original"]
    assert record.status == "ok", record.reason
    assert record.arch == "sm_90a" and record.function == "kernel" and not record.cached
    assert record.registers > 0 and record.instructions > 0 and record.tensor_core == "none"


def test_lines_added_above_a_kernel_and_its_helpers_keep_it_in_the_cache(built):
    original, moved, edited = built["original"], built["moved"], built["edited"]
    assert moved.status == "ok" and moved.cached, moved.reason
    assert moved.source_hash == original.source_hash
    # An edit of a called function's code is a new build.
    assert edited.status == "ok" and not edited.cached, edited.reason
    assert edited.source_hash != original.source_hash


def test_the_source_hash_ignores_where_a_constexpr_function_callee_starts(define):
    # Triton 3.9's registry holds no constexpr functions: the line of one leaked into the key.
    from kernelwatch.harness.build.keys import _line_free_hash

    helpers = HELPERS.replace("TWICE", "x + x")
    original = define("original", helpers, KERNEL)
    moved = define("moved", ABOVE + helpers, KERNEL)
    functions = [
        f for m in (original, moved) for f in (m.kernel, m.helpers.doubled, m.helpers.twice)
    ]
    lines = [f.starting_line_number for f in functions]
    assert _line_free_hash(moved.kernel) == _line_free_hash(original.kernel)
    # Each function is left as it was: its line, and no key memoised.
    assert [f.starting_line_number for f in functions] == lines
    assert [f.hash for f in functions] == [None] * len(functions)
    assert moved.kernel.cache_key != original.kernel.cache_key  # Triton's own key has lines


def test_a_function_that_reaches_itself_has_a_line_free_key(define):
    recursive = textwrap.dedent(
        """
        import triton
        import triton.language as tl


        @triton.jit
        def countdown(x_ptr, N: tl.constexpr):
            if N > 0:
                countdown(x_ptr, N - 1)
        """
    )
    from kernelwatch.harness.build.keys import _line_free_hash

    # One module name for both: Triton's placeholder for a function being hashed names it.
    original = define("countdown", "", recursive).countdown
    key = _line_free_hash(original)
    moved = define("countdown", "", ABOVE + recursive).countdown
    assert moved.starting_line_number > original.starting_line_number
    assert _line_free_hash(moved) == key
    assert (original.hash, moved.hash) == (None, None)


def test_comments_inside_a_kernel_and_its_callee_leave_the_key_and_the_source_as_they_were(
    define,
):
    """Issue 48: a comment line inside a kernel or a helper it calls is the same code: the
    key (what the build cache and a case's identity for a dtype that is not built read) is
    the same; an edit of the code is not. The functions keep their own source."""
    from kernelwatch.harness.build.keys import _line_free_hash

    helpers = HELPERS.replace("TWICE", "x + x")
    original = define("original", helpers, KERNEL)
    commented = define(
        "commented",
        helpers.replace("    return x + x", "    # add, not multiply\n    return x + x  # cheap"),
        KERNEL.replace("    tl.store(", "    # store the doubled values back\n\n    tl.store("),
    )
    sources = [commented.kernel.src, commented.helpers.twice.src]
    assert _line_free_hash(commented.kernel) == _line_free_hash(original.kernel)
    assert [commented.kernel.src, commented.helpers.twice.src] == sources
    assert "# store the doubled values back" in sources[0]
    edited = define("edited", HELPERS.replace("TWICE", "x * 3"), KERNEL)
    assert _line_free_hash(edited.kernel) != _line_free_hash(original.kernel)
