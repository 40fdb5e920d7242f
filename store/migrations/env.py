"""Alembic environment: runs on the connection kernelwatch.store.migrate hands over, inside
its transaction (PostgreSQL DDL is transactional, so a failed upgrade leaves nothing)."""

from __future__ import annotations

from alembic import context

context.configure(connection=context.config.attributes["connection"], target_metadata=None)
with context.begin_transaction():
    context.run_migrations()
