"""kernelwatch.store: the Postgres results store (schema, ingest, spool, embedded server)."""
