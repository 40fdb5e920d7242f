"""Summarise the cosmic-ray sessions scripts/mutation.sh leaves in a folder: the share of
mutants killed per module and per package, and the diff of every survivor (Markdown on
stdout). Mutants of operators matching EXCLUDE (a regular expression) are left out, also
those run before the session was filtered. A module run on a sample of its mutants
(scripts/mutation_sample.py) gets its share with a 95 % interval; a package's share weights
each module by its mutants. Runs in the venv that has cosmic-ray.

    .venv/bin/python scripts/mutation_report.py mutation [EXCLUDE] [--json F [--update]] \
        > mutation/summary.md

With --update, F keeps the modules these sessions did not measure (a run names its modules;
docs/results/mutation.json holds the latest score of every module).

The tables are docs_results.py's (the same renderer fills docs/TESTING.md from the JSON).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from importlib.metadata import version
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkResult
from docs_results import mutation_scores
from mutation_sample import NOT_SAMPLED


def main() -> None:
    """Print the summary of every session under the folder named on the command line, and
    write the counts as JSON with --json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("exclude", nargs="?", default="(?!)")
    parser.add_argument("--json", type=Path, help="write the counts here (docs/results/)")
    parser.add_argument(
        "--update", action="store_true", help="keep the other modules already in the --json file"
    )
    args = parser.parse_args()
    if args.update and not (args.json and args.json.is_file()):
        parser.error("--update needs an existing --json file")
    excluded = re.compile(args.exclude)
    counts: dict[str, Counter[str]] = {}
    survivors: list[tuple[str, str, str]] = []
    for session in sorted(args.folder.glob("*.sqlite")):
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
    if args.update:
        earlier = json.loads(args.json.read_text())["modules"]
        for module, outcomes in earlier.items():
            counts.setdefault(module, Counter(outcomes))
    details = {
        "tool": f"cosmic-ray {version('cosmic-ray')}",
        "modules": {module: dict(sorted(c.items())) for module, c in sorted(counts.items())},
    }
    if args.json:
        args.json.write_text(json.dumps(details, indent=1) + "\n")
    print(mutation_scores(details))
    print(f"\n## Surviving mutants ({len(survivors)})\n")
    for module, operator, diff in survivors:
        print(f"### {module}: {operator}\n\n```diff\n{diff.strip()}\n```\n")


_KILLED_BY_A_TEST = re.compile(r"pytest exit [123]")  # failed, collection error, internal


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


if __name__ == "__main__":
    main()
