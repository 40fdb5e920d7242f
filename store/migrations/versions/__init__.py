"""The migration scripts (revision files), loaded by Alembic from this directory."""
