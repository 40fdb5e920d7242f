"""Keep a seeded random sample of a cosmic-ray session's pending mutants and mark the rest
skipped ("not sampled"), for modules whose every mutant would take longer than a run has.
The sample is uniform, so a module's killed share in it estimates the whole module's;
scripts/mutation_report.py gives the sample's size and a 95% interval beside each share.

    mutation_sample.py SESSION SIZE [SEED]     SIZE 0 keeps every mutant
"""

from __future__ import annotations

import random
import sys

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkItem, WorkResult

NOT_SAMPLED = "not sampled"


def main() -> None:
    session, size = sys.argv[1], int(sys.argv[2])
    seed = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if size <= 0:
        return
    with use_db(session, WorkDB.Mode.open) as db:
        # pending_work_items comes in random order: sort, so the seed alone picks the sample.
        pending = sorted(db.pending_work_items, key=lambda item: _key(item))
        if len(pending) <= size:
            return
        kept = set(map(id, random.Random(seed).sample(pending, size)))
        for item in pending:
            if id(item) not in kept:
                result = WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=NOT_SAMPLED)
                db.set_result(item.job_id, result)
        print(f"mutation: sampled {size} of {len(pending)} mutants of {session}", file=sys.stderr)


def _key(item: WorkItem) -> tuple[str, int, tuple[int, ...]]:
    mutation = item.mutations[0]
    return (mutation.operator_name, mutation.occurrence, tuple(mutation.start_pos))


if __name__ == "__main__":
    main()
