"""What a bench run asks for (timer, L2 state, stopping rule, budgets, pins, ceilings), and
what the GPU self-check measures.

Plain data that crosses the process boundary as JSON (the parent builds it, the runner
child acts on it), so this module imports neither torch nor Triton. Budgets left None take
the device's defaults: a GPU gets nvbench-like settings, the CPU interpreter (where a launch
costs milliseconds) small ones, so CI stays fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from kernelwatch.harness.timing.pinning import Pins, pins_from_json, pins_to_json
from kernelwatch.harness.timing.roofline import Ceilings

if TYPE_CHECKING:  # sampling imports scipy (~1 s); the parent process never needs it
    from kernelwatch.harness.timing.sampling import StopRule

#: Per-device defaults: seconds of warm-up per arm, cool-down before each case, and the
#: stopping rule. On a GPU, 0.2 s of warm-up lets clocks ramp; the cool-down lets power
#: and temperature settle between cases (FlashAttention's benchmarks sleep for the same
#: reason). The 15 s timeout is nvbench's.
DEVICE_DEFAULTS: dict[str, dict[str, float]] = {
    "cuda": {
        "warmup_s": 0.2,
        "cool_down_s": 0.25,
        "min_time_s": 0.1,
        "budget_s": 2.0,
        "timeout_s": 15.0,
        "throttle_pause_s": 0.05,
    },
    "cpu": {
        "warmup_s": 0.0,
        "cool_down_s": 0.0,
        "min_time_s": 0.02,
        "budget_s": 0.2,
        "timeout_s": 10.0,
        "throttle_pause_s": 0.0,
    },
}


@dataclass(frozen=True)
class BenchOptions:
    """A bench request (docs/TIMING.md). Budgets left unset take the device's defaults
    (``DEVICE_DEFAULTS``). ``pin_source`` says where ``pins`` came from: ``pin-file`` (a
    person's), or ``checked`` (the configs the correctness check verified, so bench times
    exactly those)."""

    timer: str = "auto"
    """``auto``, ``cuda-events``, ``cuda-graph``, ``cpu-perf-counter`` or ``cpu-process-time``
    (the CPU only: the kernel child's CPU time, which other processes' load barely moves)."""
    l2: str | None = None
    """``cold`` or ``warm``. Unset: the timer's natural state."""
    target_rel_ci: float = 0.005
    """Sampling stops once the 95% CI half-width of every arm's median is under this
    fraction of it."""
    min_samples: int = 10
    """Unthrottled samples each arm needs."""
    min_time_s: float | None = None
    """Time each arm accumulates before the CI may stop sampling."""
    budget_s: float | None = None
    """Seconds of sampling per case before it stops with the CI it has."""
    timeout_s: float | None = None
    """Hard limit on a case's sampling, even short of ``min_samples``."""
    warmup_s: float | None = None
    """Warm-up per arm, so clocks ramp before timing."""
    cool_down_s: float | None = None
    """Pause before each case, for power and temperature to settle."""
    baseline: bool = True
    """Time each kernel's stock-library baseline interleaved with it."""
    measure_ceilings: bool = False
    ceilings: Ceilings | None = None
    pins: Pins = field(default_factory=dict)
    pin_source: str = "pin-file"

    def resolved(self, kind: str) -> ResolvedOptions:
        """Fill every budget left None with the defaults of a ``kind`` device."""
        from kernelwatch.harness.timing.sampling import StopRule

        defaults = DEVICE_DEFAULTS["cuda" if kind == "cuda" else "cpu"]

        def pick(name: str) -> float:
            value = getattr(self, name, None)
            return defaults[name] if value is None else value

        rule = StopRule(
            min_samples=self.min_samples,
            min_time_s=pick("min_time_s"),
            target_rel_ci=self.target_rel_ci,
            budget_s=pick("budget_s"),
            timeout_s=pick("timeout_s"),
            throttle_pause_s=defaults["throttle_pause_s"],
        )
        return ResolvedOptions(rule, pick("warmup_s"), pick("cool_down_s"))

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["ceilings"] = asdict(self.ceilings) if self.ceilings else None
        data["pins"] = pins_to_json(self.pins)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchOptions:
        options = cls(**{k: v for k, v in data.items() if k not in ("ceilings", "pins")})
        ceilings = Ceilings(**data["ceilings"]) if data.get("ceilings") else None
        return replace(options, ceilings=ceilings, pins=pins_from_json(data.get("pins", {})))


@dataclass(frozen=True)
class ResolvedOptions:
    """Options with every budget decided for the device at hand."""

    rule: StopRule
    warmup_s: float
    cool_down_s: float


@dataclass(frozen=True)
class SelfcheckOptions:
    """What the self-check measures on the device. ``kernels`` empty: all.
    ``workload``/``dtype``: where agreement and granularity take their cases (and the A/A
    stage); ``sol_kernel``/``sol_case``: the large memory-bound case; ``bench``: how each
    measurement samples (its budgets left None take the device's defaults); ``steps``: only
    these measurements (empty: all; ``device`` always comes first)."""

    kernels: tuple[str, ...] = ()
    workload: str = "llm"
    dtype: str = "bf16"
    bench: BenchOptions = field(default_factory=lambda: BenchOptions(baseline=False))
    sol_kernel: str = "silu_and_mul"
    sol_case: Mapping[str, Any] = field(
        default_factory=lambda: {"tokens": 16384, "intermediate": 28672}
    )
    steps: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        return {**data, "sol_case": dict(self.sol_case), "bench": self.bench.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelfcheckOptions:
        values = dict(data)
        for name in ("kernels", "steps"):
            values[name] = tuple(values[name])
        return cls(**{**values, "bench": BenchOptions.from_json(data["bench"])})
