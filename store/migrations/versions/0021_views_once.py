"""Each reporting view and function defined once (issue 45): ``view_definitions`` records the
checksum of every definition ``kernelwatch.store.migrate`` applied from ``store/views/``, so
an upgrade makes the views again only when a file changed, and knows what an earlier
kernelwatch created when a later one no longer defines it.

The writer may read it (``kernelwatch db status`` as the writer) but not change it, as with
``alembic_version``.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"


def upgrade() -> None:
    op.execute(
        f"""
CREATE TABLE view_definitions (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('view', 'function')),
    signature   text NOT NULL,
    position    int NOT NULL,
    checksum    text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON view_definitions FROM {WRITER};"""
    )


def downgrade() -> None:
    op.execute("DROP TABLE view_definitions;")
