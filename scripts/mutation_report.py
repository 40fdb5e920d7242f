"""Summarise the cosmic-ray sessions scripts/mutation.sh leaves in a folder: the share of
mutants killed per module and per package, and the diff of every survivor (Markdown on
stdout). Mutants of operators matching EXCLUDE (a regular expression) are left out, also
those run before the session was filtered. Runs in the venv that has cosmic-ray.

    .venv/bin/python scripts/mutation_report.py mutation [EXCLUDE] > mutation/summary.md
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkResult


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
    packages: dict[str, Counter[str]] = {}
    print(f"| module | {_HEADER} |")
    print("|---|---|---|---|---|---|---|")
    for module, c in sorted(counts.items()):
        packages.setdefault(module.split("/")[0], Counter()).update(c)
        print(_row(module, c))
    print(f"\n| package | {_HEADER} |")
    print("|---|---|---|---|---|---|---|")
    for package, c in sorted(packages.items()):
        print(_row(package, c))
    print(f"\n## Surviving mutants ({len(survivors)})\n")
    for module, operator, diff in survivors:
        print(f"### {module}: {operator}\n\n```diff\n{diff.strip()}\n```\n")


_COLUMNS = ("mutants", "killed by a test", "killed by the timeout", "survived", "not judged")
_HEADER = " | ".join((*_COLUMNS, "killed share"))
_KILLED_BY_A_TEST = re.compile(r"pytest exit [123]")  # failed, collection error, internal


def _outcome(result: WorkResult) -> str:
    """killed, timed out, survived, or not judged: a kill whose output is not the fork
    server client's last line (a client that could not reach the server exits 1 too)."""
    outcome = (result.test_outcome or result.worker_outcome).value
    if outcome != "killed":
        return "survived" if outcome == "survived" else "not judged"
    last = (result.output or "").strip().splitlines()[-1:]
    if last == ["timed out"]:
        return "timed out"
    return "killed" if last and _KILLED_BY_A_TEST.fullmatch(last[0]) else "not judged"


def _row(name: str, c: Counter[str]) -> str:
    # Mutants not judged (incompetent, or the test command failed to run) test nothing: they
    # are left out of the share, as cosmic-ray's own rate does with incompetent ones.
    killed = c["killed"] + c["timed out"]
    judged = killed + c["survived"]
    share = f"{killed / judged:.1%}" if judged else "-"
    return (
        f"| {name} | {sum(c.values())} | {c['killed']} | {c['timed out']} | {c['survived']} | "
        f"{c['not judged']} | {share} |"
    )


if __name__ == "__main__":
    main()
