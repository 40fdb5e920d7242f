"""What decides a build's compiled code, known without compiling: the cache key of a
recorded launch for one target (the kernel's source hash, the specialisation, the target and
the toolchain's versions). The build stage's cache is keyed by it (``compiler.py``), and a
case's recipe names it for a launch it does not compile (``plan.py``).
"""

from __future__ import annotations

import io
import tokenize
from typing import Any

from kernelwatch.harness.build import cute_build, nvcc, nvtools
from kernelwatch.harness.build.archs import ARCHS
from kernelwatch.harness.build.cache import cache_key
from kernelwatch.harness.build.capture import CudaLaunch, CuteLaunch, Launch, TritonLaunch
from kernelwatch.harness.cuda_kernel import source_hash


def launch_key(launch: Launch, arch: str) -> tuple[str, str, dict[str, str]]:
    """The cache key of compiling ``launch`` for ``arch``, with its source hash and
    toolchain versions: what decides the compiled code, known without compiling."""
    source, toolchain = _source_and_toolchain(launch, arch)
    language = language_of(launch)
    parts = {"language": language, "source": source, "launch": launch.identity(),
             "arch": arch, "toolchain": toolchain}  # fmt: skip
    return cache_key(parts), source, toolchain


def language_of(launch: Launch) -> str:
    """``triton``, ``cuda`` (CUDA C++) or ``cute`` (CuTe DSL): what a build record says."""
    if isinstance(launch, CudaLaunch):
        return "cuda"
    return "cute" if isinstance(launch, CuteLaunch) else "triton"


def _source_and_toolchain(launch: Launch, arch: str) -> tuple[str, dict[str, str]]:
    if isinstance(launch, TritonLaunch):
        return _line_free_hash(launch.fn), nvtools.triton_toolchain(ARCHS[arch].capability)
    if isinstance(launch, CuteLaunch):
        toolchain = {"cutlass-dsl": cute_build.dsl_version()}
        toolchain["cuobjdump"] = nvtools.tool_version(nvtools.tool("cuobjdump"))
        return source_hash(launch.kernel.source), toolchain
    flags = " ".join(nvcc.NVCC_FLAGS)
    toolchain = {"nvcc": nvcc.nvcc_version(), "nvcc_flags": flags}
    toolchain["cuobjdump"] = nvtools.tool_version(nvtools.tool("cuobjdump"))
    return source_hash(launch.kernel.source), toolchain


def _line_free_hash(fn: Any) -> str:
    """Triton's hash of ``fn``, every JIT function it calls and the constexpr globals it
    reads, computed as if every function started on line 0 and had no comments.

    Triton's own key includes each function's first line and its source text, so an edit
    above a kernel (in the same file) or a comment inside it would rebuild it; the code is
    the same (only its debug line table moves), so the cache should not see a change.

    Triton's ``cache_key`` property is run with each function it reaches (the kernel, then
    every ``@triton.jit`` and ``@triton.constexpr_function`` callee, as Triton's own
    dependency walk finds them) seen at line 0 with its comments and blank lines taken out
    of its source, and every function's line, source and memoised hash put back
    afterwards. This needs no list of all JIT functions: Triton 3.9 keeps one
    (``_triton_jit_function_registry``, without the constexpr functions), Triton 3.6 none.
    """
    owner = next(c for c in type(fn).__mro__ if "cache_key" in vars(c))
    triton_key = vars(owner)["cache_key"]
    # A function that (transitively) calls itself reaches its own key again while it is
    # being computed: Triton answers that with a placeholder it set, which must be kept.
    computing: set[int] = set()

    def line_free(self: Any) -> str:
        if id(self) in computing:
            return triton_key.fget(self)
        # Triton 3.9 keeps the source in ``_src`` (``src`` refuses assignment), 3.6 in ``src``.
        text = "_src" if "_src" in vars(self) else "src"
        saved = self.starting_line_number, self.hash, getattr(self, text)
        computing.add(id(self))
        self.starting_line_number, self.hash = 0, None
        setattr(self, text, without_comments(saved[2]))
        try:
            return triton_key.fget(self)
        finally:
            computing.discard(id(self))
            setattr(self, text, saved[2])
            self.starting_line_number, self.hash = saved[:2]

    owner.cache_key = property(line_free)
    try:
        return fn.cache_key
    finally:
        owner.cache_key = triton_key


def without_comments(source: str) -> str:
    """``source`` without its comments and blank lines: the same code to the compiler. As
    given when it does not tokenize."""
    lines = source.splitlines()
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                row, column = token.start
                lines[row - 1] = lines[row - 1][:column].rstrip()
    except (tokenize.TokenError, SyntaxError):
        return source
    return "\n".join(line for line in lines if line.strip()) + "\n"
