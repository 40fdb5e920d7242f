"""The two roles: ``kernelwatch_writer`` (ingest, detection, triage) and
``kernelwatch_reader`` (Grafana: SELECT on the reporting views only, which ``store/views/``
defines and ``migrate.upgrade`` grants it).

Roles are cluster-wide while this migration runs per database, so creating one that exists
is not an error, and downgrade keeps a role another database still grants to.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"
READER = "kernelwatch_reader"


def _create_role(name: str) -> str:
    return f"""
DO $$ BEGIN
    CREATE ROLE {name} LOGIN;
EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
END $$;"""


def _drop_role(name: str) -> str:
    return f"""
DO $$ BEGIN
    DROP ROLE {name};
EXCEPTION WHEN dependent_objects_still_exist THEN
    RAISE NOTICE 'role {name} kept: another database still grants to it';
END $$;"""


def upgrade() -> None:
    op.execute(
        _create_role(WRITER)
        + _create_role(READER)
        + f"""
GRANT USAGE ON SCHEMA public TO {WRITER}, {READER};
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA public TO {WRITER};
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE ON TABLES TO {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO {WRITER};"""
    )


def downgrade() -> None:
    op.execute(
        f"""
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON TABLES FROM {WRITER};
ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE ALL ON SEQUENCES FROM {WRITER};
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {WRITER}, {READER};
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {WRITER};
REVOKE ALL ON SCHEMA public FROM {WRITER}, {READER};"""
        + _drop_role(WRITER)
        + _drop_role(READER)
    )
