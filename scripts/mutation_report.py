"""Summarise the cosmic-ray sessions scripts/mutation.sh leaves in a folder: the share of
mutants killed per module and per package, and the diff of every survivor (Markdown on
stdout). Mutants of operators matching EXCLUDE (a regular expression) are left out, also
those run before the session was filtered. A module run on a sample of its mutants
(scripts/mutation_sample.py) gets its share with a 95 % interval; a package's share weights
each module by its mutants. Runs in the venv that has cosmic-ray.

    .venv/bin/python scripts/mutation_report.py mutation [EXCLUDE] > mutation/summary.md
"""

from __future__ import annotations

import math
import re
import sys
from collections import Counter
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkResult
from mutation_sample import NOT_SAMPLED


def main() -> None:
    """Print the summary of every session under the folder named on the command line."""
    folder = Path(sys.argv[1])
    excluded = re.compile(sys.argv[2] if len(sys.argv) > 2 else "(?!)")
    counts: dict[str, Counter[str]] = {}
    survivors: list[tuple[str, str, str]] = []
    for session in sorted(folder.glob("*.sqlite")):
        with use_db(str(session), WorkDB.Mode.open) as db:
            for item, result in db.completed_work_items:
                if excluded.fullmatch(item.mutations[0].operator_name):
                    continue
                module = str(item.mutations[0].module_path)
                counts.setdefault(module, Counter())[_outcome(result)] += 1
                if result.test_outcome == TestOutcome.SURVIVED:
                    survivors.append((module, item.mutations[0].operator_name, result.diff or ""))
            pending = sum(1 for _ in db.pending_work_items)
            if pending:
                print(f"note: {session.name} has {pending} mutants not run yet\n")
    print(f"| module | {_HEADER} |\n{_RULE}")
    for module, c in sorted(counts.items()):
        print(f"| {module} | {_cells(c)} | {_share([c])} |")
    packages: dict[str, list[Counter[str]]] = {}
    for module, c in counts.items():
        packages.setdefault(module.split("/")[0], []).append(c)
    print(f"\n| package | {_HEADER} |\n{_RULE}")
    for package, modules in sorted(packages.items()):
        print(f"| {package} | {_cells(sum(modules, Counter()))} | {_share(modules)} |")
    print(f"\n## Surviving mutants ({len(survivors)})\n")
    for module, operator, diff in survivors:
        print(f"### {module}: {operator}\n\n```diff\n{diff.strip()}\n```\n")


# Outcome -> its column.
_COLUMNS = {
    "killed": "killed by a test",
    "timed out": "killed by the timeout",
    "survived": "survived",
    "not judged": "not judged",
}
_HEADER = " | ".join(
    ("mutants", "run", *_COLUMNS.values(), "killed share (95 % interval if sampled)")
)
_RULE = "|---" * (len(_COLUMNS) + 4) + "|"
_KILLED_BY_A_TEST = re.compile(r"pytest exit [123]")  # failed, collection error, internal
_Z = 1.96


def _outcome(result: WorkResult) -> str:
    """killed, timed out, survived, not sampled, or not judged: a kill whose output is not
    the fork server client's last line (a client that cannot reach the server exits 1 too)."""
    outcome = (result.test_outcome or result.worker_outcome).value
    if result.output == NOT_SAMPLED:
        return NOT_SAMPLED
    if outcome != "killed":
        return "survived" if outcome == "survived" else "not judged"
    last = (result.output or "").strip().splitlines()[-1:]
    if last == ["timed out"]:
        return "timed out"
    return "killed" if last and _KILLED_BY_A_TEST.fullmatch(last[0]) else "not judged"


def _cells(c: Counter[str]) -> str:
    run = sum(c[column] for column in _COLUMNS)
    return " | ".join(str(n) for n in (run + c[NOT_SAMPLED], run, *(c[k] for k in _COLUMNS)))


def _share(modules: list[Counter[str]]) -> str:
    """The killed share of the mutants judged, each module weighted by its mutants (a
    stratified estimate), with a normal-approximation interval for the sampled ones.
    Mutants not judged test nothing and are left out, as cosmic-ray leaves incompetent ones."""
    strata = []
    for c in modules:
        killed = c["killed"] + c["timed out"]
        judged = killed + c["survived"]
        if judged:
            population = judged + c[NOT_SAMPLED]
            strata.append((population, killed / judged, judged))
    if not strata:
        return "-"
    total = sum(population for population, _, _ in strata)
    share = sum(population * p for population, p, _ in strata) / total
    variance = sum(
        (population / total) ** 2 * p * (1 - p) / judged * (1 - judged / population)
        for population, p, judged in strata
    )
    if variance == 0 and all(judged == population for population, _, judged in strata):
        return f"{share:.1%}"
    half = _Z * math.sqrt(variance)
    return f"{share:.1%} ({max(0.0, share - half):.1%} to {min(1.0, share + half):.1%})"


if __name__ == "__main__":
    main()
