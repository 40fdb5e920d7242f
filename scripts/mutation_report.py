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
from cosmic_ray.work_item import TestOutcome


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
                outcome = (result.test_outcome or result.worker_outcome).value
                counts.setdefault(module, Counter())[outcome] += 1
                if result.test_outcome == TestOutcome.SURVIVED:
                    survivors.append((module, item.mutations[0].operator_name, result.diff or ""))
            pending = sum(1 for _ in db.pending_work_items)
            if pending:
                print(f"note: {session.name} has {pending} mutants not run yet\n")
    packages: dict[str, Counter[str]] = {}
    print("| module | mutants | killed | survived | incompetent | killed share |")
    print("|---|---|---|---|---|---|")
    for module, c in sorted(counts.items()):
        packages.setdefault(module.split("/")[0], Counter()).update(c)
        print(_row(module, c))
    print("\n| package | mutants | killed | survived | incompetent | killed share |")
    print("|---|---|---|---|---|---|")
    for package, c in sorted(packages.items()):
        print(_row(package, c))
    print(f"\n## Surviving mutants ({len(survivors)})\n")
    for module, operator, diff in survivors:
        print(f"### {module}: {operator}\n\n```diff\n{diff.strip()}\n```\n")


def _row(name: str, c: Counter[str]) -> str:
    # Incompetent mutants (the mutated module cannot even be imported) test nothing: they
    # are left out of the share, as cosmic-ray's own rate does.
    judged = c["killed"] + c["survived"]
    share = f"{c['killed'] / judged:.1%}" if judged else "-"
    return (
        f"| {name} | {sum(c.values())} | {c['killed']} | {c['survived']} | "
        f"{c['incompetent']} | {share} |"
    )


if __name__ == "__main__":
    main()
