"""Every number that decides whether something is a regression, declared once: change-point
detection on nightly history, same-GPU A/B verdicts, bisection's judgement of a commit,
the static rules of build diffs and the nightly's suspicion test, with per-kernel overrides
by name pattern; and the nightly's budget for confirming what it suspects.

``kernelwatch.toml`` sets them (``[detection]``, ``[verdict]``, ``[bisect]``, ``[static]``,
``[confirm]``, ``[[thresholds]]``; ``config/settings.py`` reads it) and every command and flow that
decides asks :meth:`Thresholds.for_kernel` for the kernel at hand. The defaults below are
the tuned ones; docs/CONFIG.md lists them, generated from this module.

Pure data, no numpy: the configuration loader imports it on hosts that have nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase
from typing import Any


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class DetectorConfig:
    """Change-point detection on a series of per-commit times (``analysis/changepoints.py``);
    the defaults are the tuned ones of docs/DETECTION.md."""

    alpha: float = 1e-5
    """The rank test's p-value cut a change must pass."""
    min_size: int = 6
    """Points a regime needs on each side of a change."""
    window: int = 30
    """Most points either side of a split used by the scan and the test."""
    min_magnitude: float = 0.005
    """Relative shift of the level below which nothing is reported."""
    noise_factor: float = 0.5
    """Raises ``min_magnitude`` to this multiple of the series' own point-to-point noise."""
    min_effect: float = 0.3
    """Floor on the absolute Cliff's delta between the two regimes."""
    tail_points: int = 2
    """Fewest newest points a provisional change in the tail of a series needs
    (``kernelwatch detect``); 0 reports settled changes only. One point is never enough
    without an A/B to check it: an interference outlier looks the same."""
    tail_z: float = 3.0
    """How many noise sigmas every point of a provisional tail must lie beyond the level
    of the points before it."""
    lower_is_better: bool = True
    """Whether the values are times (lower is better) or rates. A property of the series,
    not a threshold: the file cannot set it."""

    def __post_init__(self) -> None:
        _require(0.0 < self.alpha < 1.0, f"alpha must be in (0, 1), got {self.alpha}")
        _require(self.min_size >= 1, f"min_size must be at least 1, got {self.min_size}")
        _require(
            self.window >= self.min_size,
            f"window must be at least min_size ({self.min_size}), got {self.window}",
        )
        for name in ("min_magnitude", "noise_factor"):
            value = getattr(self, name)
            _require(value >= 0.0, f"{name} must be at least 0, got {value}")
        _require(
            0.0 <= self.min_effect <= 1.0, f"min_effect must be in [0, 1], got {self.min_effect}"
        )
        _require(
            self.tail_points == 0 or 2 <= self.tail_points < self.min_size,
            f"tail_points must be 0 or in [2, min_size), got {self.tail_points}",
        )
        _require(self.tail_z > 0.0, f"tail_z must be above 0, got {self.tail_z}")


@dataclass(frozen=True)
class VerdictConfig:
    """Same-GPU A/B verdicts from interleaved samples (``analysis/verdict.py``): PR checks and
    each bisection probe."""

    margin: float = 0.01
    """Relative change of the ratio of medians below which two runs count as the same."""
    alpha: float = 1e-3
    """The rank test's cut for SLOWER or FASTER (Pinpoint's 0.001)."""
    confidence: float = 0.95
    """Confidence of the bootstrap interval of the ratio."""
    resamples: int = 2000
    """Bootstrap resamples."""
    seed: int = 0
    """The bootstrap's seed, so that a verdict is reproducible."""
    lower_is_better: bool = True
    """Whether the samples are times. A property of the samples: the file cannot set it."""

    def __post_init__(self) -> None:
        _require(self.margin >= 0.0, f"margin must be at least 0, got {self.margin}")
        _require(0.0 < self.alpha < 1.0, f"alpha must be in (0, 1), got {self.alpha}")
        _require(
            0.0 < self.confidence < 1.0, f"confidence must be in (0, 1), got {self.confidence}"
        )
        _require(self.resamples >= 1, f"resamples must be at least 1, got {self.resamples}")


@dataclass(frozen=True)
class BisectThresholds:
    """How bisection judges a probed commit (``analysis/bisect_search.py``)."""

    bad_fraction: float = 0.5
    """Share of the regression (per case, of ``ratio - 1`` at the bad end) a commit must
    carry to count as bad; 0 makes any SLOWER verdict bad."""

    def __post_init__(self) -> None:
        _require(
            0.0 <= self.bad_fraction < 1.0,
            f"bad_fraction must be in [0, 1), got {self.bad_fraction}",
        )


@dataclass(frozen=True)
class StaticThresholds:
    """The static rules of a build diff (``analysis/static_diff.py``). The other rules have
    no threshold: any new spill, tensor-core downgrade, lost resident block, shared memory
    over the target's limit, lost build or narrower load is a finding."""

    max_instruction_growth: float = 0.10
    """Instruction count growth (a fraction of the base count) above which a build is
    flagged."""

    def __post_init__(self) -> None:
        _require(
            self.max_instruction_growth >= 0.0,
            f"max_instruction_growth must be at least 0, got {self.max_instruction_growth}",
        )


@dataclass(frozen=True)
class SuspicionThresholds:
    """The nightly's suspicion test (``analysis/suspicion.py``): tonight's point of each series
    against the median and noise of its recent nights. A suspect is only checked, by an A/B
    of the previous nightly head against tonight's; a false suspect costs device time, never
    an alert."""

    z: float = 4.0
    """How many noise sigmas the newest point(s) must lie from the recent nights' median."""
    min_change: float = 0.02
    """Relative change of the level below which nothing is suspected."""
    min_history: int = 4
    """Nights of the current regime (after the series' last change) a test needs."""
    history: int = 30
    """Most recent nights the regime's median and noise are taken from."""
    max_tail: int = 3
    """Most newest nights tested together: a change suspected but not yet confirmed (over
    budget, or ambiguous) stays suspected this many nights, against the nights before it."""

    def __post_init__(self) -> None:
        _require(self.z > 0.0, f"z must be above 0, got {self.z}")
        _require(self.min_change >= 0.0, f"min_change must be at least 0, got {self.min_change}")
        _require(self.min_history >= 2, f"min_history must be at least 2, got {self.min_history}")
        _require(
            self.history >= self.min_history,
            f"history must be at least min_history ({self.min_history}), got {self.history}",
        )
        _require(self.max_tail >= 1, f"max_tail must be at least 1, got {self.max_tail}")


@dataclass(frozen=True)
class ConfirmBudget:
    """What the nightly may spend confirming its suspects the same night (``[confirm]``; the
    suspicion thresholds in the same table can be set per kernel). The most severe suspects
    go first; the rest are listed as unconfirmed in the nightly's summary and report."""

    budget_s: float = 600.0
    """Device seconds a night may spend on A/B confirmations; a confirmation whose expected
    cost (twice tonight's timing of its cases) would take the total past it is not started."""
    max_suspects: int = 20
    """Most timing suspects confirmed a night."""
    max_rounds: int = 2
    """A/B rounds of one suspect (each later round with twice the samples) before an
    AMBIGUOUS one is left to the change-point history."""

    def __post_init__(self) -> None:
        _require(self.budget_s >= 0.0, f"budget_s must be at least 0, got {self.budget_s}")
        _require(
            self.max_suspects >= 0, f"max_suspects must be at least 0, got {self.max_suspects}"
        )
        _require(self.max_rounds >= 1, f"max_rounds must be at least 1, got {self.max_rounds}")


#: The sections of :class:`Thresholds` and their records, in the file's order.
SECTIONS: dict[str, type] = {
    "detection": DetectorConfig,
    "verdict": VerdictConfig,
    "bisect": BisectThresholds,
    "static": StaticThresholds,
    "confirm": SuspicionThresholds,
}


@dataclass(frozen=True)
class KernelOverride:
    """One ``[[thresholds]]`` block: the kernels it covers, as ``fnmatch`` patterns on the
    kernel's name (``*``, ``?``, ``[seq]``; case-sensitive), and the values it sets, per
    section (a section's keys it leaves out keep the file's defaults)."""

    kernels: tuple[str, ...]
    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def matches(self, kernel: str) -> bool:
        """Whether one of the patterns matches ``kernel``."""
        return any(fnmatchcase(kernel, pattern) for pattern in self.kernels)


@dataclass(frozen=True)
class Thresholds:
    """The thresholds of every decision, and the per-kernel overrides.

    The first override (in file order) whose patterns match a kernel applies to it; later
    ones are not consulted, so list the more specific patterns first. Overrides are not
    combined: a kernel gets the defaults plus exactly one block's values, which keeps "what
    applies to this kernel" answerable by reading one block."""

    detection: DetectorConfig = field(default_factory=DetectorConfig)
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    bisect: BisectThresholds = field(default_factory=BisectThresholds)
    static: StaticThresholds = field(default_factory=StaticThresholds)
    confirm: SuspicionThresholds = field(default_factory=SuspicionThresholds)
    overrides: tuple[KernelOverride, ...] = ()

    def __post_init__(self) -> None:
        for override in self.overrides:
            self._apply(override)

    def for_kernel(self, kernel: str) -> Thresholds:
        """The thresholds that apply to ``kernel``, with no overrides left in them."""
        match = next((o for o in self.overrides if o.matches(kernel)), None)
        return self._apply(match) if match is not None else replace(self, overrides=())

    def _apply(self, override: KernelOverride) -> Thresholds:
        """The defaults with ``override``'s values; ValueError when a record rejects one."""
        unknown = [name for name in override.values if name not in SECTIONS]
        _require(not unknown, f"unknown threshold sections {unknown}; known: {list(SECTIONS)}")
        return Thresholds(
            **{
                name: replace(getattr(self, name), **override.values.get(name, {}))
                for name in SECTIONS
            }
        )
