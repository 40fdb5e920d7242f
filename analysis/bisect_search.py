"""Bisection of a regression's commit range on interleaved A/B verdicts.

Pure: the measuring is a callback. ``probe(commit, round)`` times ``commit`` interleaved
against the known-good commit on one GPU and returns per-case :class:`ABVerdict` s (A = good,
B = the commit) and the device seconds it cost; round 0 takes the normal samples, each
later round more (the caller decides how many; ``ABVerdict.more_samples`` suggests it).

The search, like ``git bisect`` with A/B verdicts in place of a test script:

1. **Verify the endpoints.** The bad end must be SLOWER than the good end in some case;
   otherwise the outcome is ``not_reproduced``. The cases SLOWER there are the regression's
   cases; the others are ignored from then on.
2. **Judge a commit** from its verdicts on those cases. The regression's size in case ``c``
   is its ratio ``R_c`` at the bad end; the commit is *bad* when some case is SLOWER with
   the lower end of its ratio interval at or above ``1 + bad_fraction * (R_c - 1)``: it
   carries at least that share of the slowdown (``BisectThresholds``, per case), so a
   smaller, separate slowdown elsewhere in the range is not mistaken for the culprit. It is
   *good* when every case is SAME or FASTER, or its whole interval lies below that mark;
   otherwise it is *ambiguous* and is probed again with more samples, up to ``max_rounds``
   probes, after which the search stops ``inconclusive``. A commit whose probe could not
   measure a case (crash, hang, NaN, the case missing) is *skipped*, as ``git bisect skip``
   does: the next probe takes the untested commit nearest the middle of the range instead.
3. **Budget.** Before each probe the cost is estimated from the probes of the same round so
   far (a round not seen yet: ``growth`` times the round before); when it would take the
   total past ``budget_s`` the search stops ``budget_exhausted`` with the range narrowed so far.

The outcome is ``found`` (the culprit is the first bad commit, its parent good or the good
end), ``not_reproduced``, ``inconclusive`` or ``budget_exhausted``, with the range the culprit
lies in (first possibly bad commit .. last, both inclusive), every probe, and the total cost.

:func:`bisect_checks` runs the same search with the correctness check as the probe (a
correctness regression): a commit is bad when one of the cases failing at the bad end fails
or errors, good when they all pass, skipped when one was not checked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from kernelwatch.analysis.thresholds import BisectThresholds
from kernelwatch.analysis.verdict import ABVerdict

Judgement = Literal["good", "bad", "ambiguous", "skip"]
#: Correctness verdicts that make a commit bad for a correctness bisection.
FAILING = ("fail", "error")
Status = Literal["found", "not_reproduced", "inconclusive", "budget_exhausted"]


@dataclass(frozen=True)
class BisectConfig:
    """How the search spends its probes. ``max_rounds``: probes of one commit (round 0, then
    with more samples) before an ambiguous commit stops the search. ``growth``: the expected
    cost of a round over the round before, used for the budget until a probe of that round
    has been seen. What makes a commit bad is a threshold: :class:`BisectThresholds`."""

    max_rounds: int = 3
    growth: float = 2.0

    def __post_init__(self) -> None:
        if self.max_rounds < 1:
            raise ValueError("max_rounds must be at least 1")


_CONFIG = BisectConfig()


def _same_for_every_case(case: str) -> BisectThresholds:
    return BisectThresholds()


@dataclass(frozen=True)
class Probe:
    """One measurement of a commit against the known-good commit: a verdict per case it
    could compare, why it could not for the others (``errors``), and its device seconds. A
    correctness probe has ``checks`` instead: each case's correctness verdict."""

    verdicts: Mapping[str, ABVerdict]
    gpu_seconds: float
    errors: Mapping[str, str] = field(default_factory=dict)
    checks: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Step:
    """One probe the search made, and what it concluded about the commit."""

    commit: str
    round: int
    verdicts: Mapping[str, ABVerdict]
    errors: Mapping[str, str]
    gpu_seconds: float
    judgement: Judgement
    checks: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BisectOutcome:
    """Where the search ended. ``good`` is the known-good commit every probe was timed
    against. ``range`` is (first possibly bad commit, last), inclusive: just the culprit
    when found. ``cases`` are those the regression reproduced in at the bad end (what commits
    were judged on). ``reason`` says in one line why it ended there."""

    status: Status
    good: str
    culprit: str | None
    range: tuple[str, str]
    steps: tuple[Step, ...]
    gpu_seconds: float
    cases: tuple[str, ...]
    reason: str

    def evidence(self) -> str:
        """One line for a human: what was found and how sure the measurements make it (the
        culprit's ratio interval, its parent's verdicts, the probes it took)."""
        cost = f"{len(self.steps)} probes, {self.gpu_seconds:.1f} GPU-s"
        if self.culprit is None:
            return f"bisect {self.status}: {self.reason} ({cost})"
        bad = next(s for s in reversed(self.steps) if s.commit == self.culprit)
        if bad.checks:
            case = next(c for c in self.cases if bad.checks.get(c) in FAILING)
            return (
                f"culprit {self.culprit[:12]}: {case} {bad.checks[case]}s its correctness "
                f"check; {self.reason} ({cost})"
            )
        case, worst = max(
            ((c, bad.verdicts[c]) for c in self.cases if c in bad.verdicts),
            key=lambda item: item[1].ratio,
        )
        return (
            f"culprit {self.culprit[:12]}: {case} {worst.ratio:.3f}x the good commit "
            f"(interval {worst.ci_low:.3f}-{worst.ci_high:.3f}, p={worst.p_value:.2g}); "
            f"{self.reason} ({cost})"
        )


def bisect(
    commits: Sequence[str],
    probe: Callable[[str, int], Probe],
    budget_s: float,
    config: BisectConfig = _CONFIG,
    case_thresholds: Callable[[str], BisectThresholds] = _same_for_every_case,
) -> BisectOutcome:
    """Find the first commit of ``commits`` (oldest first: the known-good commit, the
    commits after it, the bad commit) that carries the regression; see the module docstring
    for the rules. ``case_thresholds`` gives each case (named as in the probes) its own."""
    _check_range(commits)

    def middle(end: Probe) -> tuple[tuple[str, ...], Callable[[Probe], Judgement]]:
        thresholds = thresholds_from(end, case_thresholds)
        return tuple(sorted(thresholds)), lambda p: judge(p, thresholds)

    rules = _Rules(judge_bad_end, middle, "is not SLOWER in any case")
    return _Search(commits, probe, budget_s, config, rules).run()


def bisect_checks(
    commits: Sequence[str], probe: Callable[[str, int], Probe], budget_s: float
) -> BisectOutcome:
    """Find the first commit of ``commits`` (as :func:`bisect` takes them) whose correctness
    check fails in a case that fails at the bad end; ``probe(commit, 0)`` checks ``commit``
    and returns the cases' verdicts in ``Probe.checks``. A check has no sampling to refine,
    so each commit is probed once."""
    _check_range(commits)

    def middle(end: Probe) -> tuple[tuple[str, ...], Callable[[Probe], Judgement]]:
        cases = tuple(sorted(c for c, v in end.checks.items() if v in FAILING))
        return cases, lambda p: judge_checks(p, cases)

    rules = _Rules(judge_checks_end, middle, "passes every check")
    return _Search(commits, probe, budget_s, BisectConfig(max_rounds=1), rules).run()


def _check_range(commits: Sequence[str]) -> None:
    if len(commits) < 2:
        raise ValueError("bisect needs at least the good and the bad commit")
    if len(set(commits)) != len(commits):
        raise ValueError("the commit list names a commit twice")


def judge_checks_end(probe: Probe) -> Judgement:
    """A correctness bisection's bad end: bad when some case fails or errors, skip when
    nothing was checked, good otherwise."""
    if not probe.checks:
        return "skip"
    return "bad" if any(v in FAILING for v in probe.checks.values()) else "good"


def judge_checks(probe: Probe, cases: Sequence[str]) -> Judgement:
    """A commit's judgement on the cases that fail at the bad end: bad when one of them
    fails or errors, skip when one was not checked, good otherwise."""
    if any(case not in probe.checks for case in cases):
        return "skip"
    return "bad" if any(probe.checks[c] in FAILING for c in cases) else "good"


@dataclass(frozen=True)
class _Rules:
    """How a search judges: the bad end, then (from the bad end's probe) the cases the
    regression is in and the judgement of every other commit; and what the bad end failing
    to reproduce is called."""

    end: Callable[[Probe], Judgement]
    middle: Callable[[Probe], tuple[tuple[str, ...], Callable[[Probe], Judgement]]]
    not_bad: str


def judge(probe: Probe, thresholds: Mapping[str, float]) -> Judgement:
    """A commit's judgement on the regression's cases (case -> the ratio at and above which
    the lower end of a SLOWER interval counts as carrying the regression)."""
    if any(case in probe.errors or case not in probe.verdicts for case in thresholds):
        return "skip"
    bad = good = 0
    for case, threshold in thresholds.items():
        v = probe.verdicts[case]
        if v.verdict == "SLOWER" and v.ci_low >= threshold:
            bad += 1
        elif v.verdict in ("SAME", "FASTER") or v.ci_high < threshold:
            good += 1
    if bad:
        return "bad"
    return "good" if good == len(thresholds) else "ambiguous"


def judge_bad_end(probe: Probe) -> Judgement:
    """The bad end's judgement: bad when any case is SLOWER, good when every case it could
    compare is SAME or FASTER, skip when it could compare none."""
    names = {v.verdict for v in probe.verdicts.values()}
    if not names:
        return "skip"
    if "SLOWER" in names:
        return "bad"
    return "ambiguous" if "AMBIGUOUS" in names else "good"


def thresholds_from(
    probe: Probe, case_thresholds: Callable[[str], BisectThresholds]
) -> dict[str, float]:
    """Per SLOWER case of the bad end's probe, the ratio mark of :func:`judge`."""
    return {
        case: 1.0 + case_thresholds(case).bad_fraction * (v.ratio - 1.0)
        for case, v in probe.verdicts.items()
        if v.verdict == "SLOWER"
    }


class _Search:
    """The state of one bisection: the probes so far and what they cost."""

    def __init__(
        self,
        commits: Sequence[str],
        probe: Callable[[str, int], Probe],
        budget_s: float,
        config: BisectConfig,
        rules: _Rules,
    ) -> None:
        self.commits = list(commits)
        self.probe = probe
        self.budget_s = budget_s
        self.config = config
        self.rules = rules
        self.steps: list[Step] = []
        self.spent = 0.0
        self.last: Probe | None = None
        self.cases: tuple[str, ...] = ()

    def run(self) -> BisectOutcome:
        good, bad = 0, len(self.commits) - 1
        verdict = self._measure(bad, self.rules.end)
        if verdict is None:
            return self._over_budget(good, bad)
        if verdict == "skip":
            return self._end("inconclusive", good, bad, "the bad commit could not be measured")
        if verdict != "bad":
            why = "stayed AMBIGUOUS in any case" if verdict == "ambiguous" else self.rules.not_bad
            return self._end("not_reproduced", good, bad, f"the bad commit {why}")
        assert self.last is not None
        self.cases, rule = self.rules.middle(self.last)
        skipped: set[int] = set()
        while untested := [i for i in range(good + 1, bad) if i not in skipped]:
            # The untested commit nearest the middle; ties go to the older one.
            middle = min(untested, key=lambda i: (abs(2 * i - good - bad), i))
            verdict = self._measure(middle, rule)
            if verdict is None:
                return self._over_budget(good, bad)
            if verdict == "ambiguous":
                return self._end(
                    "inconclusive",
                    good,
                    bad,
                    f"{self.commits[middle][:12]} stayed AMBIGUOUS after "
                    f"{self.config.max_rounds} rounds",
                )
            if verdict == "skip":
                skipped.add(middle)
            elif verdict == "bad":
                bad = middle
            else:
                good = middle
        if bad == good + 1:
            parent = (
                "the known-good commit"
                if good == 0
                else f"{self.commits[good][:12]}, which is judged good"
            )
            return self._end("found", good, bad, f"its parent is {parent}", self.commits[bad])
        return self._end(
            "inconclusive",
            good,
            bad,
            f"{bad - good - 1} commits in the range could not be measured",
        )

    def _measure(self, index: int, rule: Callable[[Probe], Judgement]) -> Judgement | None:
        """Probe one commit round after round until it is judged (ambiguous after the last
        round); None when the next probe would go over budget."""
        commit = self.commits[index]
        for round_ in range(self.config.max_rounds):
            if self.spent + self._estimate(round_) >= self.budget_s:
                return None
            probe = self.last = self.probe(commit, round_)
            verdict = rule(probe)
            self.steps.append(
                Step(
                    commit, round_, probe.verdicts, probe.errors, probe.gpu_seconds, verdict,
                    probe.checks,
                )
            )  # fmt: skip
            self.spent += probe.gpu_seconds
            if verdict != "ambiguous":
                return verdict
        return "ambiguous"

    def _estimate(self, round_: int) -> float:
        """The expected cost of a probe of ``round_``: the dearest seen in that round, else
        ``growth`` times the estimate of the round before (0 before any probe)."""
        seen = [s.gpu_seconds for s in self.steps if s.round == round_]
        if seen:
            return max(seen)
        return self.config.growth * self._estimate(round_ - 1) if round_ > 0 else 0.0

    def _over_budget(self, good: int, bad: int) -> BisectOutcome:
        reason = (
            f"the next probe would take the {self.budget_s:g} s GPU budget over "
            f"({self.spent:.1f} s spent)"
        )
        return self._end("budget_exhausted", good, bad, reason)

    def _end(
        self, status: Status, good: int, bad: int, reason: str, culprit: str | None = None
    ) -> BisectOutcome:
        return BisectOutcome(
            status=status,
            good=self.commits[0],
            culprit=culprit,
            range=(self.commits[good + 1], self.commits[bad]),
            steps=tuple(self.steps),
            gpu_seconds=self.spent,
            cases=self.cases,
            reason=reason,
        )
