"""Kernel families on the kernels: each kernel's family as its spec declares it
(``KernelSpec.family``, carried on every record), which ``report_kernels`` gives the
dashboards' kernel pickers to label a kernel ``family / kernel``.

Kernels stored before this revision take the family their name gives, by the rule of
``kernelwatch.harness.records.FAMILY_WORDS`` frozen here as this revision's SQL, which is
the family the dashboards listed each built-in kernel in before specs declared one.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# kernelwatch.harness.records.FAMILY_WORDS at this revision: the first family one of whose
# words the kernel's name (split at "_") has.
_DEFAULT_FAMILY = """CASE
    WHEN words && ARRAY['norm'] THEN 'norm'
    WHEN words && ARRAY['gemm', 'quant'] THEN 'gemm'
    WHEN words && ARRAY['attention', 'decode'] THEN 'attention'
    WHEN words && ARRAY['moe'] THEN 'moe'
    WHEN words && ARRAY['softmax', 'silu', 'rope'] THEN 'elementwise'
    WHEN words && ARRAY['conformer'] THEN 'asr'
    ELSE '' END"""


def upgrade() -> None:
    op.execute(
        f"""
ALTER TABLE kernels ADD COLUMN family text NOT NULL DEFAULT '';
UPDATE kernels k SET family = named.family
FROM (SELECT id, {_DEFAULT_FAMILY} AS family
      FROM (SELECT id, string_to_array(name, '_') AS words FROM kernels) w) named
WHERE named.id = k.id;
"""
    )


def downgrade() -> None:
    op.execute("ALTER TABLE kernels DROP COLUMN family;")
