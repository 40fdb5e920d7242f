"""Bisection on A/B verdicts, driven by synthetic probes: a simulated history whose verdicts
come from the real ``compare`` on noisy samples, and scripted verdicts for the edge cases."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
import pytest

from kernelwatch.analysis.bisect_search import (
    BisectConfig,
    Probe,
    bisect,
    bisect_checks,
    judge,
    thresholds_from,
)
from kernelwatch.analysis.thresholds import BisectThresholds, KernelOverride, Thresholds
from kernelwatch.analysis.verdict import ABVerdict, compare
from kernelwatch.flows.bisection import probe_result
from kernelwatch.harness.records import (
    ABMeasurement,
    CaseId,
    DeviceInfo,
    Measurement,
    Method,
    SoftwareInfo,
)

_DEFAULT = BisectThresholds()
ROUNDS = BisectConfig().max_rounds


def _commits(n: int) -> list[str]:
    """``n`` commits, oldest first, with sha-like names."""
    return [f"{i:02d}" + "c" * 38 for i in range(n)]


class History:
    """Each commit's true time per case, relative to the good commit; a probe times it
    against the good commit with lognormal noise (3% by default), more samples each round."""

    def __init__(
        self, commits: Sequence[str], levels: Mapping[str, Sequence[float]], noise: float = 0.03
    ) -> None:
        self.noise = noise
        self.levels = {
            c: {case: lv[i] for case, lv in levels.items()} for i, c in enumerate(commits)
        }
        self.rng = np.random.default_rng(7)
        self.calls: list[tuple[str, int]] = []

    def __call__(self, commit: str, round_: int) -> Probe:
        self.calls.append((commit, round_))
        n = 40 * 2**round_
        verdicts = {}
        for case, level in self.levels[commit].items():
            a = 1e5 * np.exp(self.rng.normal(0, self.noise, n))
            b = 1e5 * level * np.exp(self.rng.normal(0, self.noise, n))
            verdicts[case] = compare(a, b)
        return Probe(verdicts, gpu_seconds=n * 0.01)


def _step(at: int, n: int, size: float = 2.0) -> list[float]:
    return [1.0] * at + [size] * (n - at)


@pytest.mark.parametrize("n", range(2, 10))
def test_the_culprit_is_found_at_every_position(n):
    commits = _commits(n)
    for culprit in range(1, n):
        history = History(commits, {"gemm": _step(culprit, n)})
        outcome = bisect(commits, history, budget_s=1e9)
        assert outcome.status == "found", (n, culprit, outcome.reason)
        assert outcome.culprit == commits[culprit] and outcome.range == (outcome.culprit,) * 2
        assert history.calls[0] == (commits[-1], 0)  # the bad end is verified first
        probed = {commit for commit, _ in history.calls}
        assert len(probed) <= 1 + math.ceil(math.log2(n - 1))  # binary search, plus the end
        assert outcome.cases == ("gemm",)
        assert outcome.gpu_seconds == pytest.approx(sum(s.gpu_seconds for s in outcome.steps))


def test_flat_history_is_not_reproduced_after_one_probe():
    commits = _commits(6)
    history = History(commits, {"gemm": [1.0] * 6, "softmax": [1.0] * 6}, noise=0.005)
    outcome = bisect(commits, history, budget_s=1e9)
    assert outcome.status == "not_reproduced" and outcome.culprit is None
    assert history.calls == [(commits[-1], 0)]
    assert outcome.range == (commits[1], commits[-1])
    assert "is not SLOWER" in outcome.reason


def test_noisy_flat_history_is_not_reproduced_within_max_rounds():
    commits = _commits(6)
    history = History(commits, {"gemm": [1.0] * 6}, noise=0.05)
    outcome = bisect(commits, history, budget_s=1e9)
    assert outcome.status == "not_reproduced"
    assert {c for c, _ in history.calls} == {commits[-1]}
    assert len(history.calls) <= ROUNDS


def test_only_the_cases_slower_at_the_bad_end_are_followed():
    commits = _commits(8)
    levels = {"gemm": _step(5, 8), "softmax": [1.0, 0.7, 1.3, 1.0, 0.7, 1.3, 1.0, 1.0]}
    outcome = bisect(commits, History(commits, levels), budget_s=1e9)
    assert outcome.cases == ("gemm",)
    assert (outcome.status, outcome.culprit) == ("found", commits[5])


def test_a_smaller_separate_slowdown_is_not_taken_for_the_culprit():
    commits = _commits(10)
    # gemm: +20% at commit 2, then x2 on top at commit 6; softmax: x2 at commit 6.
    levels = {"gemm": [1.0, 1.0] + [1.2] * 4 + [2.4] * 4, "softmax": _step(6, 10)}

    def culprit(any_slowdown_in: str = "") -> str | None:
        def own(case: str) -> BisectThresholds:
            return BisectThresholds(bad_fraction=0.0) if case == any_slowdown_in else _DEFAULT

        history = History(commits, levels, noise=0.01)
        return bisect(commits, history, 1e9, case_thresholds=own).culprit

    assert culprit() == commits[6]
    # Each case is judged by its own threshold: any slowdown of gemm makes commit 2 bad,
    # any slowdown of softmax changes nothing.
    assert culprit(any_slowdown_in="gemm") == commits[2]
    assert culprit(any_slowdown_in="softmax") == commits[6]


def test_a_probe_judges_each_case_by_its_kernels_verdict_thresholds():
    rng = np.random.default_rng(3)
    device = DeviceInfo("cuda", "NVIDIA H200", "node-1", False, "GPU-1", "9.0", 132)
    software = SoftwareInfo("0.1.0", "3.11.7", "2.13.0", "3.9.0", "13.0", "580.1")
    method = Method("cuda-events", "cold", 1)

    def pair(kernel: str, slowdown: float) -> ABMeasurement:
        case = CaseId("builtin", kernel, "llm", {"n": 4096}, "fp16")
        sides = [
            Measurement(case, "ok", "", method, device, software,
                        samples_ns=tuple(1e5 * level * np.exp(rng.normal(0, 0.003, 60))))
            for level in (1.0, slowdown)
        ]  # fmt: skip
        return ABMeasurement(case, "ok", "", method, device, software, *sides)

    pairs = [pair("flash_attention_fwd", 1.05), pair("gemm", 1.05)]
    wide = KernelOverride(("flash_attention*",), {"verdict": {"margin": 0.1}})
    probe = probe_result(pairs, None, Thresholds(overrides=(wide,)))
    verdicts = {label.split()[0]: v.verdict for label, v in probe.verdicts.items()}
    assert verdicts == {"flash_attention_fwd": "SAME", "gemm": "SLOWER"}


def _verdict(name: str, ratio: float, low: float, high: float, more: int | None = 10):
    return ABVerdict(name, ratio, low, high, 1e-6, 40, 40, more, None, "")


SLOWER = _verdict("SLOWER", 2.0, 1.9, 2.1)
SAME = _verdict("SAME", 1.0, 0.995, 1.005)
AMBIGUOUS = _verdict("AMBIGUOUS", 1.4, 0.9, 2.2)


class Script:
    """A probe that answers from a table: (commit, round) -> verdict, error text or a whole
    Probe; commits not listed are SAME before ``culprit`` and SLOWER from it. A probe costs
    ``cost`` seconds, or ``cost[round]`` when it is a sequence."""

    def __init__(
        self,
        commits: list[str],
        culprit: int,
        table=None,
        cost: float | Sequence[float] = 1.0,
    ) -> None:
        self.commits, self.culprit, self.table, self.cost = commits, culprit, table or {}, cost
        self.calls: list[tuple[str, int]] = []

    def __call__(self, commit: str, round_: int) -> Probe:
        self.calls.append((commit, round_))
        cost = self.cost[round_] if isinstance(self.cost, Sequence) else self.cost
        answer = self.table.get((self.commits.index(commit), round_))
        if answer is None:
            answer = SLOWER if self.commits.index(commit) >= self.culprit else SAME
        if isinstance(answer, Probe):
            return answer
        if isinstance(answer, str):
            return Probe({}, cost, {"gemm": answer})
        return Probe({"gemm": answer}, cost)


def test_ambiguous_probes_again_with_more_samples_then_resolves():
    commits = _commits(9)  # the first probe after the bad end is commit 4
    script = Script(commits, culprit=3, table={(4, 0): AMBIGUOUS, (4, 1): AMBIGUOUS})
    outcome = bisect(commits, script, budget_s=100)
    assert outcome.status == "found" and outcome.culprit == commits[3]
    assert script.calls[:4] == [(commits[8], 0), (commits[4], 0), (commits[4], 1), (commits[4], 2)]
    assert [s.judgement for s in outcome.steps[1:4]] == ["ambiguous", "ambiguous", "bad"]


def test_still_ambiguous_after_max_rounds_is_inconclusive():
    commits = _commits(9)
    table = {(4, r): AMBIGUOUS for r in range(ROUNDS)}
    outcome = bisect(commits, Script(commits, culprit=3, table=table), budget_s=100)
    assert outcome.status == "inconclusive" and outcome.culprit is None
    assert outcome.reason == f"{commits[4][:12]} stayed AMBIGUOUS after {ROUNDS} rounds"
    assert outcome.range == (commits[1], commits[8])
    assert len(outcome.steps) == 1 + ROUNDS  # the bad end, then every round of commit 4


def test_an_ambiguous_bad_end_gets_more_samples_before_it_counts():
    commits = _commits(5)
    script = Script(commits, culprit=2, table={(4, 0): AMBIGUOUS})
    outcome = bisect(commits, script, budget_s=100)
    assert (outcome.status, outcome.culprit) == ("found", commits[2])
    assert script.calls[:2] == [(commits[4], 0), (commits[4], 1)]
    always = Script(commits, culprit=2, table={(4, r): AMBIGUOUS for r in range(3)})
    outcome = bisect(commits, always, budget_s=100)
    assert outcome.status == "not_reproduced" and "stayed AMBIGUOUS" in outcome.reason


def test_budget_stops_the_search_with_the_range_narrowed_so_far():
    commits = _commits(17)
    script = Script(commits, culprit=11, cost=10.0)
    outcome = bisect(commits, script, budget_s=35.0)
    assert outcome.status == "budget_exhausted" and outcome.culprit is None
    # The bad end (16), then 8 (good), then 12 (bad); a fourth probe would make 40 s.
    assert [c for c, _ in script.calls] == [commits[16], commits[8], commits[12]]
    assert outcome.range == (commits[9], commits[12])
    assert outcome.gpu_seconds == 30.0 <= 35.0
    assert "35 s GPU budget" in outcome.reason


def test_the_budget_counts_more_expensive_rounds_before_they_run():
    commits = _commits(9)
    # Round 0 costs 10 s; an unseen round 1 is expected to cost twice that.
    script = Script(commits, culprit=3, table={(4, 0): AMBIGUOUS}, cost=10.0)
    outcome = bisect(commits, script, budget_s=35.0)
    assert outcome.status == "budget_exhausted" and len(outcome.steps) == 2


def test_a_commit_that_cannot_be_measured_is_skipped():
    commits = _commits(9)
    script = Script(commits, culprit=6, table={(4, 0): "segfault: died of signal SIGSEGV"})
    outcome = bisect(commits, script, budget_s=100)
    assert (outcome.status, outcome.culprit) == ("found", commits[6])
    assert outcome.steps[1].judgement == "skip" and outcome.steps[1].errors
    # Next nearest the middle: of 3 and 5, the older.
    assert script.calls[2][0] == commits[3]


def test_only_skipped_commits_left_is_inconclusive_with_their_range():
    commits = _commits(9)
    script = Script(commits, culprit=6, table={(5, 0): "hung"})
    outcome = bisect(commits, script, budget_s=100)
    assert outcome.status == "inconclusive" and outcome.culprit is None
    assert outcome.range == (commits[5], commits[6])
    assert "1 commits in the range could not be measured" in outcome.reason


def test_a_bad_end_that_cannot_be_measured_is_inconclusive_not_unreproduced():
    commits = _commits(5)
    outcome = bisect(commits, Script(commits, culprit=2, table={(4, 0): "NaN"}), 100)
    assert outcome.status == "inconclusive" and "could not be measured" in outcome.reason


def test_evidence_names_the_culprit_and_its_interval():
    commits = _commits(5)
    outcome = bisect(commits, Script(commits, culprit=2), budget_s=100)
    line = outcome.evidence()
    assert line.startswith(f"culprit {commits[2][:12]}: gemm 2.000x the good commit")
    assert "interval 1.900-2.100" in line
    assert f"its parent is {commits[1][:12]}, which is judged good (" in line
    assert line.endswith("(3 probes, 3.0 GPU-s)")
    assert outcome.good == commits[0]
    flat = bisect(commits, Script(commits, culprit=99), budget_s=100)
    assert flat.evidence().startswith("bisect not_reproduced: ")


def test_adjacent_good_and_bad_need_only_the_verification():
    commits = _commits(2)
    outcome = bisect(commits, Script(commits, culprit=1), budget_s=100)
    assert (outcome.status, outcome.culprit) == ("found", commits[1])
    assert "the known-good commit" in outcome.reason and len(outcome.steps) == 1


@pytest.mark.parametrize(
    ("commits", "config", "message"),
    [
        (["a"], BisectConfig(), "at least the good and the bad"),
        (["a", "b", "a"], BisectConfig(), "twice"),
    ],
)
def test_bad_input_is_refused(commits, config, message):
    with pytest.raises(ValueError, match=message):
        bisect(commits, Script(list(commits), culprit=1), 100, config)
    with pytest.raises(ValueError, match=message):
        bisect_checks(commits, Checks(list(commits), culprit=1), 100)
    with pytest.raises(ValueError, match="max_rounds"):
        BisectConfig(max_rounds=0)


def test_an_exact_count_of_unmeasured_commits_is_given():
    commits = _commits(9)
    # 4 is skipped, then 3, 5, then 2 is good; 6 and 7 are skipped too: 3..7 are left.
    script = Script(commits, culprit=8, table={(i, 0): "hung" for i in range(3, 8)})
    outcome = bisect(commits, script, budget_s=100)
    assert (outcome.status, outcome.range) == ("inconclusive", (commits[3], commits[8]))
    assert outcome.reason == "5 commits in the range could not be measured"


def test_a_range_of_hundreds_of_commits_takes_log2_probes():
    commits = _commits(400)
    script = Script(commits, culprit=300)
    outcome = bisect(commits, script, budget_s=1e9)
    assert (outcome.status, outcome.culprit) == ("found", commits[300])
    assert len(script.calls) <= 1 + math.ceil(math.log2(399))


def test_evidence_is_the_culprits_own_probe_whatever_the_shas_sort_as():
    # Shas sort in no particular order: here the culprit's parent (probed last) sorts
    # after the culprit.
    commits = [c * 40 for c in "afbed"]
    outcome = bisect(commits, Script(commits, culprit=2), budget_s=100)
    assert [s.commit for s in outcome.steps] == [commits[4], commits[2], commits[1]]
    assert outcome.evidence().startswith(f"culprit {commits[2][:12]}: gemm 2.000x")
    checked = bisect_checks(commits, Checks(commits, culprit=2), budget_s=100)
    assert checked.evidence().startswith(f"culprit {commits[2][:12]}: gemm fails")


def test_evidence_names_the_case_slowed_down_most():
    commits = _commits(3)
    worse = dataclasses.replace(SLOWER, ratio=2.5, ci_low=2.4, ci_high=2.6)
    both = Probe({"attention": worse, "gemm": SLOWER}, 1.0)
    script = Script(commits, culprit=1, table={(1, 0): both, (2, 0): both})
    outcome = bisect(commits, script, budget_s=100)
    assert outcome.evidence().startswith(f"culprit {commits[1][:12]}: attention 2.500x")


def test_records_are_immutable():
    commits = _commits(3)
    outcome = bisect(commits, Script(commits, culprit=1), budget_s=100)
    for record, name in [
        (BisectConfig(), "growth"),
        (Probe({}, 1.0), "gpu_seconds"),
        (outcome.steps[0], "judgement"),
        (outcome, "culprit"),
    ]:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, None)


@pytest.mark.parametrize(
    ("budget_s", "probes"),
    [(0.0, 0), (0.5, 1)],
)
def test_the_first_probe_is_free_to_start_within_any_positive_budget(budget_s, probes):
    # Before any probe its cost is unknown (taken as 0): no budget starts none.
    commits = _commits(5)
    outcome = bisect(commits, Script(commits, culprit=2), budget_s=budget_s)
    assert outcome.status == "budget_exhausted" and len(outcome.steps) == probes


@pytest.mark.parametrize(("budget_s", "rounds"), [(200.0, 3), (200.5, 4)])
def test_an_unseen_round_is_expected_to_cost_growth_times_the_round_before(budget_s, rounds):
    commits = _commits(9)
    table = {(4, r): AMBIGUOUS for r in range(3)}
    script = Script(commits, culprit=3, table=table, cost=(10.0, 30.0, 50.0, 70.0))
    bisect(commits, script, budget_s, BisectConfig(max_rounds=4))
    # 100 s spent by round 2 of commit 4; round 3 is expected to cost 2 x 50 s: a budget of
    # exactly 200 s does not allow it.
    assert [r for c, r in script.calls if c == commits[4]] == list(range(rounds))


@pytest.mark.parametrize(("budget_s", "probed"), [(110.0, False), (110.5, True)])
def test_a_rounds_cost_is_estimated_from_that_round_only(budget_s, probed):
    commits = _commits(9)
    table = {(4, 0): AMBIGUOUS, (4, 1): AMBIGUOUS}
    script = Script(commits, culprit=3, table=table, cost=(10.0, 30.0, 50.0))
    bisect(commits, script, budget_s)
    # 100 s spent when commit 4 turns bad in round 2; the next commit's round 0 is expected
    # to cost 10 s, not the 50 s of a later round.
    assert ((commits[2], 0) in script.calls) is probed


def test_thresholds_carry_the_bad_fraction_of_each_slower_cases_slowdown():
    probe = Probe(
        {
            "gemm": _verdict("SLOWER", 3.0, 2.9, 3.1),
            "softmax": _verdict("SLOWER", 1.5, 1.4, 1.6),
            "norm": SAME,
            "relu": _verdict("FASTER", 0.5, 0.45, 0.55),
            "attention": AMBIGUOUS,
        },
        1.0,
    )
    fractions = {"gemm": 0.25, "softmax": 0.5}
    marks = thresholds_from(probe, lambda case: BisectThresholds(fractions[case]))
    assert marks == {"gemm": 1.5, "softmax": 1.25}


@pytest.mark.parametrize(
    ("verdicts", "marks", "judgement"),
    [
        ({"gemm": _verdict("SLOWER", 1.6, 1.5, 1.7)}, {"gemm": 1.5}, "bad"),  # low on the mark
        ({"gemm": SLOWER}, {"gemm": 1.5}, "bad"),
        ({"gemm": _verdict("SLOWER", 1.4, 1.3, 1.5)}, {"gemm": 1.5}, "ambiguous"),  # high on it
        ({"gemm": _verdict("SLOWER", 1.5, 1.3, 1.7)}, {"gemm": 1.5}, "ambiguous"),
        ({"gemm": _verdict("SLOWER", 1.2, 1.1, 1.3)}, {"gemm": 1.5}, "good"),  # below the mark
        ({"gemm": SAME}, {"gemm": 1.5}, "good"),
        ({"gemm": _verdict("FASTER", 0.5, 0.45, 0.55)}, {"gemm": 1.5}, "good"),
        ({"gemm": AMBIGUOUS}, {"gemm": 1.5}, "ambiguous"),
        # With a mark of 1 (bad_fraction 0) only a SLOWER verdict is bad, whatever the
        # interval of a SAME or AMBIGUOUS one.
        ({"gemm": SAME}, {"gemm": 1.0}, "good"),
        ({"gemm": _verdict("SAME", 1.005, 1.002, 1.008)}, {"gemm": 1.0}, "good"),
        ({"gemm": _verdict("AMBIGUOUS", 1.02, 1.002, 1.04)}, {"gemm": 1.0}, "ambiguous"),
        ({"gemm": SLOWER, "softmax": AMBIGUOUS}, {"gemm": 1.5, "softmax": 1.5}, "bad"),
        ({"gemm": SAME, "softmax": AMBIGUOUS}, {"gemm": 1.5, "softmax": 1.5}, "ambiguous"),
        ({"gemm": SAME, "softmax": SAME}, {"gemm": 1.5, "softmax": 1.5}, "good"),
        ({"gemm": SLOWER}, {"gemm": 1.5, "softmax": 1.5}, "skip"),  # softmax missing
    ],
)
def test_judge_on_the_marks(verdicts, marks, judgement):
    assert judge(Probe(verdicts, 1.0), marks) == judgement


def test_judge_counts_every_case_of_a_wide_regression():
    # A toolchain change can slow every case of a large suite down at once.
    marks = {f"case{i}": 1.5 for i in range(300)}
    assert judge(Probe(dict.fromkeys(marks, SAME), 1.0), marks) == "good"
    one_unsure = dict.fromkeys(marks, SAME) | {"case7": AMBIGUOUS}
    assert judge(Probe(one_unsure, 1.0), marks) == "ambiguous"


def test_judge_skips_a_case_that_errored():
    errored = Probe({"gemm": SLOWER}, 1.0, errors={"softmax": "NaN"})
    assert judge(errored, {"gemm": 1.5, "softmax": 1.5}) == "skip"


class Checks:
    """A correctness probe: gemm fails from ``culprit`` on (``failing`` names how), softmax
    always passes; ``table`` overrides a commit's checks."""

    def __init__(self, commits: list[str], culprit: int, failing="fail", table=None) -> None:
        self.commits, self.culprit, self.failing = commits, culprit, failing
        self.table = table or {}
        self.calls: list[tuple[str, int]] = []

    def __call__(self, commit: str, round_: int) -> Probe:
        self.calls.append((commit, round_))
        i = self.commits.index(commit)
        gemm = self.failing if i >= self.culprit else "pass"
        return Probe({}, 2.0, checks=self.table.get(i, {"gemm": gemm, "softmax": "pass"}))


@pytest.mark.parametrize("failing", ["fail", "error"])
@pytest.mark.parametrize("n", range(2, 10))
def test_a_correctness_culprit_is_found_at_every_position(n, failing):
    commits = _commits(n)
    for culprit in range(1, n):
        checks = Checks(commits, culprit, failing)
        outcome = bisect_checks(commits, checks, budget_s=1e9)
        assert (outcome.status, outcome.culprit) == ("found", commits[culprit]), outcome.reason
        assert outcome.range == (commits[culprit],) * 2 and outcome.cases == ("gemm",)
        assert checks.calls[0] == (commits[-1], 0)
        assert {r for _, r in checks.calls} == {0}  # a check is never repeated
        assert len(checks.calls) <= 1 + math.ceil(math.log2(n - 1))
        assert outcome.gpu_seconds == 2.0 * len(checks.calls)


@pytest.mark.parametrize("failing", ["fail", "error"])
def test_correctness_evidence_names_the_failing_case(failing):
    commits = _commits(5)
    outcome = bisect_checks(commits, Checks(commits, 2, failing), budget_s=100)
    assert outcome.evidence() == (
        f"culprit {commits[2][:12]}: gemm {failing}s its correctness check; its parent is "
        f"{commits[1][:12]}, which is judged good (3 probes, 6.0 GPU-s)"
    )


def test_a_correctness_bad_end_that_passes_is_not_reproduced():
    commits = _commits(5)
    checks = Checks(commits, culprit=99)
    outcome = bisect_checks(commits, checks, budget_s=100)
    assert outcome.status == "not_reproduced" and outcome.culprit is None
    assert outcome.reason == "the bad commit passes every check"
    assert checks.calls == [(commits[4], 0)]


def test_a_correctness_bad_end_with_nothing_checked_is_inconclusive():
    commits = _commits(5)
    outcome = bisect_checks(commits, Checks(commits, 2, table={4: {}}), budget_s=100)
    assert outcome.status == "inconclusive"
    assert outcome.reason == "the bad commit could not be measured"


def test_a_commit_that_did_not_check_a_failing_case_is_skipped():
    commits = _commits(9)
    checks = Checks(commits, culprit=6, table={4: {"softmax": "pass"}})
    outcome = bisect_checks(commits, checks, budget_s=100)
    assert (outcome.status, outcome.culprit) == ("found", commits[6])
    assert outcome.steps[1].commit == commits[4] and outcome.steps[1].judgement == "skip"


def test_a_case_that_passes_at_the_bad_end_is_not_followed():
    commits = _commits(9)
    # softmax fails in 2..4 and is fixed again by the bad end: only gemm is the regression.
    table = {i: {"gemm": "pass", "softmax": "fail"} for i in range(2, 5)}
    outcome = bisect_checks(commits, Checks(commits, 6, table=table), budget_s=100)
    assert outcome.cases == ("gemm",)
    assert (outcome.status, outcome.culprit) == ("found", commits[6])
