"""Launch a Triton kernel at a pinned config or through Triton's autotuner, and report the
config used as a :class:`LaunchConfig` (it becomes part of every record's provenance)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import triton

from kernelwatch.harness.records import LaunchConfig


class Tunable:
    """A ``@triton.jit`` kernel with a tuning space."""

    def __init__(
        self, kernel: triton.JITFunction, configs: Sequence[LaunchConfig], key: list[str]
    ) -> None:
        self.kernel = kernel
        self.configs = tuple(configs)
        self.key = key

    @functools.cached_property
    def autotuner(self) -> triton.runtime.Autotuner:
        # Built on first use: the autotuner benchmarks on a device, which a CPU host lacks.
        configs = [
            triton.Config(dict(c.meta), num_warps=c.num_warps, num_stages=c.num_stages)
            for c in self.configs
        ]
        return triton.autotune(configs=configs, key=self.key)(self.kernel)

    def launch(
        self,
        grid: Callable[[dict[str, Any]], tuple[int, ...]],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        config: LaunchConfig | None,
    ) -> LaunchConfig:
        """Autotune when ``config`` is None, else launch exactly ``config``."""
        if config is None:
            self.autotuner[grid](*args, **kwargs)
            best = self.autotuner.best_config
            return LaunchConfig(dict(best.kwargs), best.num_warps, best.num_stages)
        self.kernel[grid](
            *args, **kwargs, **config.meta, num_warps=config.num_warps, num_stages=config.num_stages
        )
        return config
