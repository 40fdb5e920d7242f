"""Alembic migrations of the results store, run programmatically by kernelwatch.store.migrate."""
