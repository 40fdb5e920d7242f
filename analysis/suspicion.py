"""The nightly's suspicion, every night, and the order in which it confirms what it suspects.

Three signals, each cheap and each only a suspicion until confirmed or deterministic:

- **timing**: tonight's point of a series against the median and noise of its recent nights
  (``tail.py``; one point is enough, since an A/B of the previous nightly head against
  tonight's head on the same GPU checks it before anything is opened);
- **correctness**: a case that passed in the previous nightly and fails or errors tonight;
- **static**: a build of tonight's head that regressed against the previous nightly head's
  (``static_diff.py``, the ``build-diff`` rules).

Timing suspects cost device time to confirm, so :func:`schedule` orders them by severity,
keeps at most ``max_suspects`` and starts a confirmation only while its expected cost fits
the night's budget; every suspect it leaves out is returned with the reason. Pure: the A/B
is a callback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

import numpy as np

from kernelwatch.analysis.bisect_search import FAILING
from kernelwatch.analysis.noise import relative_noise
from kernelwatch.analysis.tail import TailRule, TailShift, tail_shift
from kernelwatch.analysis.thresholds import ConfirmBudget, SuspicionThresholds
from kernelwatch.analysis.verdict import ABVerdict

SuspectKind = Literal["timing", "correctness", "static"]
#: What became of a suspect: a regression or an improvement confirmed by A/B, checked noise
#: (A/B SAME), waiting for history (still AMBIGUOUS, or the A/B could not measure it), or not
#: confirmed tonight (over the budget or the night's most suspects).
Outcome = Literal["regression", "improvement", "checked_noise", "waiting", "unconfirmed"]

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")


def suspect_timing(
    levels: Sequence[float],
    thresholds: SuspicionThresholds,
    regime_start: int = 0,
    checked: Collection[int] = (),
    lower_is_better: bool = True,
) -> TailShift | None:
    """Whether the newest nights of a series (``levels``: one positive value per night,
    oldest first, tonight last) left its recent regime: the longest tail of at most
    ``max_tail`` nights whose every point lies ``z`` noise sigmas beyond the median of the
    nights before it (from ``regime_start``, the first night after the series' last known
    change; the nights in ``checked``, already found to be noise, left out), by at least
    ``min_change``. None when nothing is suspected or the regime is shorter than
    ``min_history`` nights."""
    values = np.asarray(levels, dtype=float)
    if values.size < 2 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        return None
    x = np.log(values) * (1.0 if lower_is_better else -1.0)
    reference = [i for i in range(regime_start, values.size - 1) if i not in checked]
    rule = TailRule(
        z=thresholds.z,
        min_shift=math.log1p(thresholds.min_change),
        min_points=1,
        max_points=thresholds.max_tail,
        min_reference=thresholds.min_history,
        reference=thresholds.history,
    )
    return tail_shift(x, rule, relative_noise(x[reference]), regime_start, set(checked))


def too_wide(rel_ci_halfwidth: float | None, margin: float) -> bool:
    """Whether a night's point cannot be judged: its relative 95% CI half-width is wider than
    ``margin``, the smallest change of the level the suspicion acts on (``min_change``), so a
    change that size could hide inside it. A point with no CI (not timed) is not one."""
    return rel_ci_halfwidth is not None and not rel_ci_halfwidth <= margin


def newly_failing(last_night: Mapping[K, str], tonight: Mapping[K, str]) -> list[K]:
    """The cases (any key) that passed last night and fail or error tonight, in tonight's
    order. A case new tonight, or one that already failed, is not new breakage."""
    return [k for k, v in tonight.items() if v in FAILING and last_night.get(k) == "pass"]


def outcome_of(verdict: ABVerdict | None) -> Outcome:
    """What an A/B verdict (None: it could not measure) makes of a timing suspect."""
    if verdict is None:
        return "waiting"
    return {
        "SLOWER": "regression",
        "FASTER": "improvement",
        "SAME": "checked_noise",
        "AMBIGUOUS": "waiting",
    }[verdict.verdict]  # type: ignore[return-value]


@dataclass(frozen=True)
class Measured:
    """One A/B measurement of a group of suspects: each suspect's verdict (absent: the A/B
    could not measure it, with the reason in ``errors``) and the device seconds it cost."""

    verdicts: Mapping[int, ABVerdict]
    gpu_seconds: float
    errors: Mapping[int, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Confirmed(Generic[S]):
    """What :func:`schedule` found for one suspect: its last verdict (None: never measured,
    or not measurable), the rounds it took, its share of the device seconds, the outcome and
    a line saying why."""

    suspect: S
    verdict: ABVerdict | None
    rounds: int
    gpu_seconds: float
    outcome: Outcome
    note: str


def schedule(
    suspects: Sequence[S],
    group: Callable[[S], Hashable],
    severity: Callable[[S], float],
    estimate: Callable[[S], float],
    measure: Callable[[Hashable, Sequence[int], int], Measured],
    budget: ConfirmBudget,
) -> list[Confirmed[S]]:
    """Confirm timing suspects within the night's budget, the most severe first.

    Suspects of one ``group`` (a kernel at one commit range: one A/B measures them all) are
    confirmed together; ``measure(group, indices, round)`` runs its A/B (round 0 the normal
    samples, each later round more) and returns a verdict per suspect index. Only the
    ``max_suspects`` most severe are confirmed; a group is started only when the seconds
    spent plus its expected cost (``estimate`` summed over its suspects, doubled each round)
    stay within ``budget_s``. AMBIGUOUS suspects are measured again, up to ``max_rounds``
    rounds, while the budget allows. Returns one entry per suspect, in ``suspects``' order.
    """
    order = sorted(range(len(suspects)), key=lambda i: -severity(suspects[i]))
    chosen, over = order[: budget.max_suspects], order[budget.max_suspects :]
    results: dict[int, Confirmed[S]] = {
        i: Confirmed(
            suspects[i], None, 0, 0.0, "unconfirmed",
            f"not confirmed: over the night's {budget.max_suspects} most severe suspects",
        )
        for i in over
    }  # fmt: skip
    groups: dict[Hashable, list[int]] = {}
    for i in chosen:
        groups.setdefault(group(suspects[i]), []).append(i)
    spent = 0.0
    for key, members in groups.items():
        pending = list(members)
        verdicts: dict[int, ABVerdict] = {}
        errors: dict[int, str] = {}
        costs = dict.fromkeys(members, 0.0)
        taken = dict.fromkeys(members, 0)
        rounds = 0
        while pending and rounds < budget.max_rounds:
            cost = (2**rounds) * sum(estimate(suspects[i]) for i in pending)
            if spent + cost > budget.budget_s:
                break
            measured = measure(key, pending, rounds)
            rounds += 1
            spent += measured.gpu_seconds
            for i in pending:
                costs[i] += measured.gpu_seconds / len(pending)
                taken[i] += 1
            verdicts.update({i: v for i, v in measured.verdicts.items() if i in pending})
            errors.update({i: e for i, e in measured.errors.items() if i in pending})
            pending = [i for i in pending if i in verdicts and verdicts[i].verdict == "AMBIGUOUS"]
        for i in members:
            results[i] = _result(suspects[i], verdicts.get(i), errors.get(i), taken[i], costs[i],
                                 budget, spent)  # fmt: skip
    return [results[i] for i in range(len(suspects))]


def _result(
    suspect: S,
    verdict: ABVerdict | None,
    error: str | None,
    rounds: int,
    seconds: float,
    budget: ConfirmBudget,
    spent: float,
) -> Confirmed[S]:
    if rounds == 0:
        note = (
            f"not confirmed: its A/B would take the night's {budget.budget_s:g} s budget "
            f"over ({spent:.1f} s spent)"
        )
        return Confirmed(suspect, None, 0, 0.0, "unconfirmed", note)
    if verdict is None:
        note = f"the A/B could not measure it ({error or 'no result'}); waiting for history"
        return Confirmed(suspect, None, rounds, seconds, "waiting", note)
    outcome = outcome_of(verdict)
    note = verdict.reason + ("; waiting for history" if outcome == "waiting" else "")
    return Confirmed(suspect, verdict, rounds, seconds, outcome, note)
