"""Least privilege: the reader role reads the reporting views and functions only (its
SELECT on base tables such as ``bisect_steps`` is revoked), nobody but the reader may execute
the SECURITY DEFINER functions (PostgreSQL grants EXECUTE to PUBLIC by default), and the
writer may read the schema revision but not change it; no role creates objects in public.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

WRITER = "kernelwatch_writer"
READER = "kernelwatch_reader"

# Run ``statement`` (a format() string taking the name twice) for every table of the schema
# (kind r) or every SECURITY DEFINER function (kind f) as they are when this runs.
_FOR_EACH = """
DO $$ DECLARE item record; BEGIN
    FOR item IN
        SELECT format('%I', c.relname) AS name FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND '{kind}' = 'r'
        UNION ALL
        SELECT p.oid::regprocedure::text FROM pg_proc p
            JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = 'public' AND p.prosecdef AND '{kind}' = 'f'
    LOOP
        EXECUTE format('{statement}', item.name, item.name);
    END LOOP;
END $$;"""


def upgrade() -> None:
    op.execute(_FOR_EACH.format(kind="r", statement=f"REVOKE ALL ON %s FROM {READER}"))
    op.execute(
        _FOR_EACH.format(
            kind="f",
            statement=f"REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC; "
            f"GRANT EXECUTE ON FUNCTION %s TO {READER}",
        )
    )
    op.execute(f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON alembic_version FROM {WRITER};")
    # PostgreSQL before 15 lets every role create tables in public.
    op.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC;")
    op.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;")


def downgrade() -> None:
    op.execute("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT EXECUTE ON FUNCTIONS TO PUBLIC;")
    op.execute(f"GRANT INSERT, UPDATE ON alembic_version TO {WRITER};")
    op.execute(_FOR_EACH.format(kind="f", statement="GRANT EXECUTE ON FUNCTION %s TO PUBLIC"))
    op.execute(f"GRANT SELECT ON bisect_steps TO {READER};")
