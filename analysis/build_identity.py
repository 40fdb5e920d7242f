"""A case's build identity: what it runs on the GPU, as one hash, known before anything is
timed.

Two commits whose case launches the same code (the same SASS and resources, from the same
toolchain) with the same grids and arguments, on inputs made the same way, in the same
environment, do the same GPU work: timing both can only measure noise. The identity hashes
exactly that, from the case's recipe (``harness/build/plan.py`` records it on the meta
device) and the build records its launches name. Each launch is taken with its position in
the case's launch sequence, so two launches of one kernel are two parts of it.

A launch of a dtype the stage does not build (a PR check records every dtype it times but
builds the serving ones) is identified by its build's cache key instead: the kernel's
source, the specialisation, the target and the toolchain, so any edit of the kernel's
source, a comment too, changes it.

It never hides a change: anything that cannot be identified makes the identity None, and a
None is never equal to anything (a launch whose build failed, a launch or an input the
recorder could not describe, a vendor library's call in the launch, a case with no launch
at all).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping

from kernelwatch.analysis.static_diff import BuildKey, build_key
from kernelwatch.harness.records import BuildMetrics, CaseRecipe, LaunchStep

#: A case as both sides of a comparison name it: (kernel, dtype, its parameters as JSON with
#: sorted keys: the store gives them back in another order than a spec declares them).
CaseKey = tuple[str, str, str]


def case_key(kernel: str, dtype: str, params: Mapping[str, object]) -> CaseKey:
    """The key :func:`identities` files a case under."""
    return (kernel, dtype, json.dumps(dict(params), sort_keys=True, separators=(",", ":")))


def identities(
    recipes: Iterable[CaseRecipe],
    builds: Iterable[BuildMetrics],
    environment: Mapping[str, str] | None = None,
) -> dict[CaseKey, str | None]:
    """Each recipe's case and its identity (None: cannot be identified). ``environment``
    adds what the recipe does not know and decides what runs (the driver, say)."""
    table = {build_key(b): b for b in builds}
    extra = sorted((environment or {}).items())
    return {case_key(r.kernel, r.dtype, r.params): identity(r, table, extra) for r in recipes}


def identity(
    recipe: CaseRecipe,
    builds: Mapping[BuildKey, BuildMetrics],
    environment: Iterable[tuple[str, str]] = (),
) -> str | None:
    """The identity of ``recipe``'s case, with its launches' builds from ``builds``
    (:func:`~kernelwatch.analysis.static_diff.build_key` to record); None when any part
    cannot be identified."""
    if recipe.unknown or not recipe.steps:
        return None
    parts: list[object] = [recipe.host, list(environment)]
    for step in recipe.steps:
        if step.work is None:
            return None
        build = builds.get(_step_key(recipe, step))
        if build is None:
            # A dtype the stage does not build: the build's cache key (source, specialisation,
            # target, toolchain) stands in for its code, so any edit of the kernel's source
            # counts as a change there.
            if step.key is None:
                return None
            parts.append([step.arch, step.position, step.function, step.work, "key", step.key])
            continue
        code = build.sass_sha256 or build.cubin_sha256
        if build.status != "ok" or code is None:
            return None
        parts.append(
            [step.arch, step.position, step.function, step.work, code, build.registers,
             build.stack_bytes, build.shared_static_bytes, build.shared_dynamic_bytes,
             build.num_warps, build.num_stages, sorted(build.toolchain.items())]
        )  # fmt: skip
    return hashlib.sha256(json.dumps(parts, separators=(",", ":")).encode()).hexdigest()


def identical(
    base: Mapping[CaseKey, str | None], head: Mapping[CaseKey, str | None]
) -> frozenset[CaseKey]:
    """The cases whose identity is known and the same on both sides."""
    return frozenset(k for k, v in head.items() if v is not None and base.get(k) == v)


def _step_key(recipe: CaseRecipe, step: LaunchStep) -> BuildKey:
    config = step.config.label() if step.config is not None else ""
    return (recipe.kernel, step.function, recipe.dtype, config, step.build_case, step.arch,
            step.build_index)  # fmt: skip
