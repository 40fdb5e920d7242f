"""How much of a serving change the kernels explain: a step's GPU time is the sum of its
kernels' times, so each kernel's change between the kernel commits deployed before and
after, weighted by its share of the step, predicts the step's change.

With the trace of the run before the change (shares ``s`` of the old step) the step moves
by ``sum(s * (r - 1))``; with the trace of the run after it (shares of the new step), by
``x / (1 - x)`` with ``x = sum(s * (1 - 1 / r))``: the same prediction from the other side,
exact for a step that is only its kernels. Each kernel's part is its term, scaled so the
parts add up to the prediction. What the model cannot see (CPU overhead, scheduling, a
batch that changed shape) is in the unexplained rest; a kernel kernelwatch did not measure
at both commits, or did not match, counts as unchanged and is named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernelwatch.serving.names import Match


@dataclass(frozen=True)
class KernelPart:
    """One kernel's part of the prediction: its change between the two commits (``ratio``
    after/before), its share in the trace and the step change it accounts for (pct)."""

    kernel: str
    ratio: float
    share: float
    explained_pct: float


@dataclass(frozen=True)
class Explanation:
    """A serving change (``observed_pct``) against the kernels' prediction."""

    metric: str
    observed_pct: float
    explained_pct: float
    parts: tuple[KernelPart, ...]
    unmeasured: tuple[str, ...]
    unmatched_share: float

    @property
    def unexplained_pct(self) -> float:
        """What the kernels do not account for."""
        return self.observed_pct - self.explained_pct

    def sentence(self, top: int = 3) -> str:
        """``p99_tpot_ms +6.1%: kernels explain +5.2% (fused_moe +14% x 37% of the step;
        rms_norm +3% x 4%), unexplained +0.9%``."""
        moved = [p for p in self.parts if abs(p.ratio - 1.0) >= 0.005][:top]
        detail = "; ".join(
            f"{p.kernel} {100 * (p.ratio - 1):+.0f}% x {p.share:.0%}"
            + (" of the step" if i == 0 else "")
            for i, p in enumerate(moved)
        )
        return (
            f"{self.metric} {self.observed_pct:+.1f}%: kernels explain "
            f"{self.explained_pct:+.1f}%"
            + (f" ({detail})" if detail else "")
            + f", unexplained {self.unexplained_pct:+.1f}%"
        )


def explain(
    metric: str,
    observed_pct: float,
    matches: Sequence[Match],
    ratios: Mapping[str, float],
    trace_after: bool,
) -> Explanation:
    """The explanation of ``metric``'s change of ``observed_pct`` percent from a trace's
    ``matches`` and each kernelwatch kernel's ``ratios`` (after/before) between the two
    kernel commits; ``trace_after``: the trace is of the run after the change."""
    shares: dict[str, float] = {}
    unmatched = 0.0
    for m in matches:
        if m.kernel is None or m.role != "kernel":
            # A library kernel is the same library at both commits: unchanged.
            unmatched += m.trace.share if m.kernel is None else 0.0
            continue
        shares[m.kernel] = shares.get(m.kernel, 0.0) + m.trace.share
    unmeasured = tuple(sorted(k for k in shares if k not in ratios))
    terms = {
        k: (s * (1.0 - 1.0 / ratios[k]) if trace_after else s * (ratios[k] - 1.0))
        for k, s in shares.items()
        if k in ratios
    }
    x = sum(terms.values())
    scale = 1.0 / (1.0 - x) if trace_after else 1.0
    parts = sorted(
        (KernelPart(k, ratios[k], shares[k], 100.0 * t * scale) for k, t in terms.items()),
        key=lambda p: -abs(p.explained_pct),
    )
    return Explanation(metric, observed_pct, 100.0 * x * scale, tuple(parts), unmeasured,
                       unmatched)  # fmt: skip
