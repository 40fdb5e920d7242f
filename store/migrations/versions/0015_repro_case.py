"""The repro command names its case (issue 30).

``report_regression_repro`` again, the same columns: the command gains a ``--param KEY=VALUE``
for each parameter of the case (by name), so it measures that one case again, not every case of its
kernel, workload and dtype. A timing regression's case is its series' (the one that moved
most); a correctness finding's is its night's case label. A static finding is a build of a
kernel and dtype, so its command stays pinned to those.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import importlib

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

READER = "kernelwatch_reader"
_EARLIER = importlib.import_module("kernelwatch.store.migrations.versions.0014_fleet_scale")
_shell, _OPTION = _EARLIER._shell, _EARLIER._OPTION

# A case label is ``m=33 n=40 k=48``: split before each ``KEY=``, so a value may hold a space.
_PARAMS = f"""coalesce(CASE
    WHEN w.kernel IS NOT NULL THEN
        (SELECT string_agg(' --param ' || {_shell("p.key || '=' || p.value")}, '' ORDER BY p.key)
         FROM jsonb_each_text(w.params) p)
    WHEN ns.kind = 'correctness' THEN
        (SELECT string_agg(' --param ' || {_shell("p.pin")}, '' ORDER BY p.n)
         FROM regexp_split_to_table(ns.case_label, ' (?=[^ =]+=)') WITH ORDINALITY p(pin, n)
         WHERE p.pin LIKE '%=%')
    END, '')"""


def _with_case(repro: str) -> str:
    """0014's view with the case's parameters read and appended to the command."""
    edits = (
        (" AS repro\n", f"\n        || {_PARAMS} AS repro\n"),
        ("s.workload, s.dtype\n", "s.workload, s.dtype, s.params\n"),
        ("n.dtype FROM night_suspects n", "n.dtype, n.kind, n.case_label FROM night_suspects n"),
    )
    for old, new in edits:
        if repro.count(old) != 1:
            raise ValueError(f"0014's repro view changed: {old!r}")
        repro = repro.replace(old, new)
    return repro


REPRO = _with_case(_EARLIER.REPRO)


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW report_regression_repro AS {REPRO};")
    op.execute(f"GRANT SELECT ON report_regression_repro TO {READER};")


def downgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW report_regression_repro AS {_EARLIER.REPRO};")
